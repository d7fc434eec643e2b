// Keys: the list (search, status), create (the full key shown once, with a copy button),
// edit, disable or enable, and revoke with confirmation. Every field comes from
// KEY_FIELDS.

import { useEffect, useMemo, useState } from 'preact/hooks';
import { api } from '../api.js';
import { KEY_FIELDS, TYPES, fieldOf, getPath, setPath, shown } from '../fields.js';
import { time } from '../format.js';
import { LimitsTable } from '../limits.jsx';
import { href } from '../nav.js';
import { Badge, Dialog, Empty, ErrorBox, UsageBar, useLoad } from '../ui.jsx';

const isExpired = (k) => k.expires_at && new Date(k.expires_at) <= new Date();

function StatusBadge({ k }) {
  if (isExpired(k)) return <Badge kind="warn">expired</Badge>;
  return <Badge kind={k.status === 'enabled' ? 'ok' : 'off'}>{k.status}</Badge>;
}

/** A field's value in the list: budgets with their usage bar. */
function Cell({ f, k }) {
  if (f.name === 'status') return <StatusBadge k={k} />;
  const limit = getPath(k, f.name);
  if (f.used && limit !== null && limit !== undefined) {
    const used = getPath(k, f.used) || 0;
    return (
      <span class="budget">
        {TYPES[f.type].show(used)} of {shown(f, k)}
        <UsageBar used={used} limit={limit} />
      </span>
    );
  }
  if (f.used) return <span>{TYPES[f.type].show(getPath(k, f.used) || 0)} · {shown(f, k)}</span>;
  return <span>{shown(f, k)}</span>;
}

function matches(k, search, status) {
  if (status === 'expired' && !isExpired(k)) return false;
  if ((status === 'enabled' || status === 'disabled') && (k.status !== status || isExpired(k))) return false;
  const s = search.trim().toLowerCase();
  if (!s) return true;
  return [k.name, k.id, k.key_display, k.group, ...(k.models || [])].some((v) => v && v.toLowerCase().includes(s));
}

/**
 * The create and edit form, one control per field of `fields`, for the records under
 * `endpoint` (keys by default; groups of keys would pass their own fields, endpoint and
 * noun).
 */
export function RecordForm({ record, onSaved, onCancel, fields = KEY_FIELDS, endpoint = '/admin/keys', noun = 'key' }) {
  const editing = !!record;
  const [text, setText] = useState(() =>
    Object.fromEntries(fields.map((f) => [f.name, TYPES[f.type].toInput(record ? getPath(record, f.name) : f.type === 'choice' ? f.choices[0] : null)])),
  );
  const [errors, setErrors] = useState({});
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  // The choices of `ref` fields (a key's group), loaded from the admin API.
  const [choices, setChoices] = useState({});
  useEffect(() => {
    for (const f of fields.filter((x) => x.load)) {
      f.load().then(
        (list) => setChoices((c) => ({ ...c, [f.name]: { list } })),
        (err) => setChoices((c) => ({ ...c, [f.name]: { list: [], error: err } })),
      );
    }
  }, [fields]);

  const submit = async (e) => {
    e.preventDefault();
    const body = {};
    const bad = {};
    for (const f of fields) {
      if (editing && f.create) continue;
      const r = TYPES[f.type].parse(text[f.name], f);
      if (r.error) {
        bad[f.name] = r.error;
        continue;
      }
      const empty = r.value === null || r.value === '' || (Array.isArray(r.value) && r.value.length === 0);
      if (editing) {
        const before = getPath(record, f.name) ?? null;
        if (JSON.stringify(before) !== JSON.stringify(r.value)) setPath(body, f.name, r.value);
      } else if (!empty) {
        setPath(body, f.name, r.value);
      }
    }
    setErrors(bad);
    if (Object.keys(bad).length) return;
    setBusy(true);
    setError(null);
    try {
      const saved = editing ? await api('PATCH', `${endpoint}/${encodeURIComponent(record.id)}`, body) : await api('POST', endpoint, body);
      onSaved(saved);
    } catch (err) {
      setError(err);
      const f = fieldOf(err.param, fields);
      if (f) setErrors({ [f]: err.message });
      setBusy(false);
    }
  };

  return (
    <form onSubmit={submit} class="form" novalidate>
      {fields.map((f) => {
        const t = TYPES[f.type];
        const id = `field-${f.name.replace(/\./g, '-')}`;
        const set = (e) => setText({ ...text, [f.name]: e.currentTarget.value });
        const common = { id, name: f.name, value: text[f.name], onInput: set, 'aria-describedby': `${id}-help`, 'aria-invalid': errors[f.name] ? 'true' : undefined };
        const loaded = choices[f.name];
        // A ref's choices: none, every loaded one, and the current value even if it is not
        // among them (a list that failed to load keeps the record's value).
        const refs = f.type === 'ref' ? [...(loaded ? loaded.list : [])] : [];
        if (f.type === 'ref' && text[f.name] && !refs.some((c) => c.value === text[f.name])) refs.push({ value: text[f.name], label: text[f.name] });
        return (
          <div class={`field ${errors[f.name] ? 'invalid' : ''}`}>
            <label for={id}>{f.label}</label>
            {t.input === 'textarea' ? (
              <textarea rows="3" {...common} />
            ) : f.type === 'ref' ? (
              <select {...common} onChange={set}>
                <option value="">{loaded ? `None (${f.empty})` : 'Loading…'}</option>
                {refs.map((c) => (
                  <option value={c.value}>{c.label}</option>
                ))}
              </select>
            ) : t.input === 'select' ? (
              <select {...common} onChange={set}>
                {f.choices.map((c) => (
                  <option value={c}>{c}</option>
                ))}
              </select>
            ) : (
              <input type={t.input} step={t.step} min={f.min} readonly={editing && f.create} list={f.suggest ? `${id}-list` : undefined} autocomplete="off" {...common} />
            )}
            {f.suggest && (
              <datalist id={`${id}-list`}>
                {f.suggest().map((v) => (
                  <option value={v} />
                ))}
              </datalist>
            )}
            <small id={`${id}-help`} class="muted">
              {f.help}
            </small>
            {loaded && loaded.error && <small class="field-error">The choices could not be loaded: {loaded.error.message}</small>}
            {errors[f.name] && <small class="field-error">{errors[f.name]}</small>}
          </div>
        );
      })}
      <ErrorBox error={error} title={`The ${noun} was not ${editing ? 'saved' : 'created'}`} />
      <div class="actions">
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
        <button type="submit" class="primary" disabled={busy}>
          {busy ? 'Saving…' : editing ? 'Save' : `Create ${noun}`}
        </button>
      </div>
    </form>
  );
}

/** The one time the full key is shown. Closing drops it from the page. */
function CreatedKey({ created, onClose }) {
  const [copied, setCopied] = useState(null);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(created.key);
      setCopied('Copied.');
    } catch {
      document.getElementById('new-key').select();
      setCopied('Selected: press Ctrl+C (⌘C) to copy.');
    }
  };
  return (
    <Dialog title="Your new key" onClose={onClose}>
      <p>
        Copy this key now. <strong>It is shown only this once</strong>: the gateway keeps only its hash.
      </p>
      <div class="secret">
        <input id="new-key" readonly value={created.key} aria-label="The new key" onFocus={(e) => e.currentTarget.select()} />
        <button class="primary" onClick={copy}>
          Copy
        </button>
      </div>
      {copied && (
        <p class="notice" role="status">
          {copied}
        </p>
      )}
      <p class="muted small">
        {created.name || 'Unnamed key'} · {created.key_display} · id {created.id}
      </p>
      <div class="actions">
        <button onClick={onClose}>I have copied it</button>
      </div>
    </Dialog>
  );
}

function Revoke({ k, onDone, onCancel }) {
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const revoke = async () => {
    setBusy(true);
    try {
      await api('DELETE', `/admin/keys/${encodeURIComponent(k.id)}`);
      onDone();
    } catch (e) {
      setError(e);
      setBusy(false);
    }
  };
  return (
    <Dialog title="Revoke this key?" onClose={onCancel}>
      <p>
        <strong>{k.name || 'Unnamed key'}</strong> ({k.key_display}) will be refused from its next request on. This cannot be undone;
        its usage records stay.
      </p>
      <ErrorBox error={error} title="The key was not revoked" />
      <div class="actions">
        <button onClick={onCancel}>Keep it</button>
        <button class="danger" onClick={revoke} disabled={busy}>
          {busy ? 'Revoking…' : 'Revoke'}
        </button>
      </div>
    </Dialog>
  );
}

/** A record's fields as a list of terms, from `fields`; `link` may turn a value into a link. */
export function Fields({ fields, record, link = {} }) {
  return (
    <dl class="record">
      {fields.map((f) => (
        <>
          <dt>{f.label}</dt>
          <dd data-field={f.name}>{link[f.name] && getPath(record, f.name) ? link[f.name](getPath(record, f.name)) : f.name === 'status' ? <StatusBadge k={record} /> : shown(f, record)}</dd>
        </>
      ))}
    </dl>
  );
}

/** One key: its fields, and every limit of it and of its group with what is used and left. */
function KeyDetail({ id }) {
  const key = useLoad(() => api('GET', `/admin/keys/${encodeURIComponent(id)}`), [id]);
  const [editing, setEditing] = useState(false);
  const k = key.data;
  return (
    <section>
      <div class="toolbar">
        <h1>{k ? k.name || k.key_display : 'Key'}</h1>
        <a class="button" href={href('keys')}>
          All keys
        </a>
        {k && <button onClick={() => setEditing(true)}>Edit</button>}
        <a class="button" href={href('spend', { key: id })}>
          Spend
        </a>
        <a class="button" href={href('requests', { key: id })}>
          Requests
        </a>
        <button onClick={key.reload} disabled={key.loading}>
          {key.loading ? 'Loading…' : 'Refresh'}
        </button>
      </div>
      <ErrorBox error={key.error} title="The key could not be loaded" />
      {k && (
        <>
          <section class="card">
            <h2>Limits now</h2>
            <p class="muted small">What is used and left of each limit of this key{k.group ? ' and of its group' : ''}, and when it starts again.</p>
            <LimitsTable rows={(k.limits || []).map((l) => ({ limit: l }))} label="Key limits" none="This key has no limit: nothing caps its spend or rate." />
          </section>
          <section class="card">
            <h2>Settings</h2>
            <p class="muted small mono">
              {k.key_display} · id {k.id} · created {time(k.created_at)}
            </p>
            <Fields fields={KEY_FIELDS} record={k} link={{ group: (g) => <a href={href('groups', { id: g })}>{g}</a> }} />
          </section>
        </>
      )}
      {editing && k && (
        <Dialog title={`Edit ${k.name || k.key_display}`} onClose={() => setEditing(false)}>
          <RecordForm
            record={k}
            onSaved={() => {
              setEditing(false);
              key.reload();
            }}
            onCancel={() => setEditing(false)}
          />
        </Dialog>
      )}
    </section>
  );
}

export function KeysPage({ params = {} }) {
  if (params.id) return <KeyDetail id={params.id} />;
  return <KeyList />;
}

function KeyList() {
  const keys = useLoad(() => api('GET', '/admin/keys'), []);
  const [search, setSearch] = useState('');
  const [status, setStatus] = useState('all');
  const [open, setOpen] = useState(null); // {kind: create|edit|revoke|created, k}
  const [error, setError] = useState(null);
  const list = keys.data ? keys.data.data : [];
  const shownKeys = useMemo(() => list.filter((k) => matches(k, search, status)).reverse(), [list, search, status]);
  const columns = KEY_FIELDS.filter((f) => f.list && f.name !== 'name');

  const toggle = async (k) => {
    setError(null);
    try {
      await api('PATCH', `/admin/keys/${encodeURIComponent(k.id)}`, { status: k.status === 'enabled' ? 'disabled' : 'enabled' });
      keys.reload();
    } catch (e) {
      setError(e);
    }
  };
  const close = () => setOpen(null);
  const saved = (v) => {
    keys.reload();
    // Only a creation answers with the key itself; it goes to the show-once dialog.
    setOpen(v.key ? { kind: 'created', k: v } : null);
  };

  return (
    <section>
      <div class="toolbar">
        <h1>Keys</h1>
        <input type="search" placeholder="Search name, id, model…" aria-label="Search keys" value={search} onInput={(e) => setSearch(e.currentTarget.value)} />
        <select aria-label="Status" value={status} onChange={(e) => setStatus(e.currentTarget.value)}>
          <option value="all">All statuses</option>
          <option value="enabled">Enabled</option>
          <option value="disabled">Disabled</option>
          <option value="expired">Expired</option>
        </select>
        <button class="primary" onClick={() => setOpen({ kind: 'create' })}>
          New key
        </button>
      </div>
      <ErrorBox error={keys.error} title="The keys could not be loaded" />
      <ErrorBox error={error} title="The key was not changed" />
      {keys.data && !list.length && <Empty>No keys yet. Create one to start.</Empty>}
      {keys.data && list.length > 0 && !shownKeys.length && <Empty>No key matches.</Empty>}
      {shownKeys.length > 0 && (
        <div class="table-wrap">
          <table class="cards">
            <thead>
              <tr>
                <th>Name</th>
                <th>Key</th>
                {columns.map((f) => (
                  <th>{f.label}</th>
                ))}
                <th>Created</th>
                <th>
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {shownKeys.map((k) => (
                <tr data-key-id={k.id}>
                  <td data-label="Name">
                    <a href={href('keys', { id: k.id })}>
                      <strong>{k.name || <span class="muted">unnamed</span>}</strong>
                    </a>
                    <div class="muted small mono">{k.id}</div>
                  </td>
                  <td data-label="Key" class="mono">
                    {k.key_display}
                  </td>
                  {columns.map((f) => (
                    <td data-label={f.label}>
                      {f.name === 'group' && k.group ? <a href={href('groups', { id: k.group })}>{k.group}</a> : <Cell f={f} k={k} />}
                    </td>
                  ))}
                  <td data-label="Created">{time(k.created_at)}</td>
                  <td class="row-actions">
                    <a class="button" href={href('keys', { id: k.id })}>
                      Limits
                    </a>
                    <button onClick={() => setOpen({ kind: 'edit', k })}>Edit</button>
                    <button onClick={() => toggle(k)}>{k.status === 'enabled' ? 'Disable' : 'Enable'}</button>
                    <a class="button" href={href('spend', { key: k.id })}>
                      Spend
                    </a>
                    <a class="button" href={href('requests', { key: k.id })}>
                      Requests
                    </a>
                    <button class="danger" onClick={() => setOpen({ kind: 'revoke', k })}>
                      Revoke
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {open && open.kind === 'create' && (
        <Dialog title="New key" onClose={close}>
          <RecordForm onSaved={saved} onCancel={close} />
        </Dialog>
      )}
      {open && open.kind === 'edit' && (
        <Dialog title={`Edit ${open.k.name || open.k.key_display}`} onClose={close}>
          <RecordForm record={open.k} onSaved={saved} onCancel={close} />
        </Dialog>
      )}
      {open && open.kind === 'created' && <CreatedKey created={open.k} onClose={close} />}
      {open && open.kind === 'revoke' && (
        <Revoke
          k={open.k}
          onCancel={close}
          onDone={() => {
            close();
            keys.reload();
          }}
        />
      )}
    </section>
  );
}
