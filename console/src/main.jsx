// The console's shell: the sign-in form, the navigation, and a router on the URL's hash
// (`#/keys`, `#/spend?key=…`), so every view has an address and the gateway serves one
// page.

import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { session, tryToken, whenRefused } from './api.js';
import { ErrorBox } from './ui.jsx';
import { parseHash } from './nav.js';
import { KeysPage } from './pages/keys.jsx';
import { GroupsPage } from './pages/groups.jsx';
import { SpendPage } from './pages/spend.jsx';
import { RequestsPage } from './pages/requests.jsx';
import { ChannelsPage } from './pages/channels.jsx';
import './style.css';

const PAGES = [
  { id: 'keys', label: 'Keys', view: KeysPage },
  { id: 'groups', label: 'Groups', view: GroupsPage },
  { id: 'spend', label: 'Spend', view: SpendPage },
  { id: 'requests', label: 'Requests', view: RequestsPage },
  { id: 'channels', label: 'Channels', view: ChannelsPage },
];

function SignIn({ notice }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await tryToken(token.trim());
      session.signIn(token.trim());
      location.reload();
    } catch (err) {
      setError(err);
      setBusy(false);
    }
  };
  return (
    <main class="signin">
      <form onSubmit={submit} class="card">
        <h1>model-gateway</h1>
        <p class="muted">Sign in with the admin token (<code>admin.token</code> in the configuration).</p>
        {notice && !error && <p class="notice">{notice}</p>}
        <label>
          Admin token
          <input
            type="password"
            name="token"
            autocomplete="current-password"
            required
            value={token}
            onInput={(e) => setToken(e.currentTarget.value)}
          />
        </label>
        <ErrorBox error={error} title="Sign-in refused" />
        <button type="submit" class="primary" disabled={busy || !token.trim()}>
          {busy ? 'Checking…' : 'Sign in'}
        </button>
        <p class="muted small">The token is kept in this tab only, and forgotten when it closes.</p>
      </form>
    </main>
  );
}

function App() {
  const [route, setRoute] = useState(parseHash);
  const [signedIn, setSignedIn] = useState(() => !!session.token());
  const [notice, setNotice] = useState(null);
  useEffect(() => {
    const on = () => setRoute(parseHash());
    addEventListener('hashchange', on);
    whenRefused(() => {
      setNotice('The admin token was refused: sign in again.');
      setSignedIn(false);
    });
    return () => removeEventListener('hashchange', on);
  }, []);
  if (!signedIn) return <SignIn notice={notice} />;
  const Page = PAGES.find((p) => p.id === route.page).view;
  const signOut = () => {
    session.signOut();
    setNotice('Signed out.');
    setSignedIn(false);
  };
  return (
    <>
      <header class="top">
        <span class="brand">model-gateway</span>
        <nav aria-label="Pages">
          {PAGES.map((p) => (
            <a href={`#/${p.id}`} aria-current={p.id === route.page ? 'page' : undefined}>
              {p.label}
            </a>
          ))}
        </nav>
        <button class="ghost" onClick={signOut}>
          Sign out
        </button>
      </header>
      <main class="page">
        <Page params={route.params} />
      </main>
    </>
  );
}

render(<App />, document.getElementById('app'));
