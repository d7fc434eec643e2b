// Requests: the latest usage records, filtered by key, group, model, status and time, and any
// request found by its id (paste the id, or the whole error message that ends with it).
// A record shows every field; estimated costs and overruns are marked.

import { useState } from 'preact/hooks';
import { api, query } from '../api.js';
import { count, fromLocalInput, money, time, toLocalInput } from '../format.js';
import { go, href } from '../nav.js';
import { Badge, Dialog, Empty, ErrorBox, useLoad } from '../ui.jsx';

/** The request id in what was pasted: a bare id, or an error message's `(request id: …)`. */
export function requestIdIn(text) {
  const t = text.trim();
  const m = t.match(/request id:\s*([A-Za-z0-9_-]+)/i);
  if (m) return m[1];
  const bare = t.match(/^[A-Za-z0-9_-]+$/);
  return bare ? t : null;
}

const FIELDS = [
  ['request_id', 'Request id'],
  ['created_at', 'Arrived', time],
  ['key_name', 'Key name'],
  ['key_display', 'Key'],
  ['key_id', 'Key id'],
  ['group', 'Group'],
  ['endpoint', 'Endpoint'],
  ['model', 'Model'],
  ['channel', 'Channel'],
  ['status', 'Status'],
  ['stream', 'Streamed', (v) => (v ? 'yes' : 'no')],
  ['latency_ms', 'Latency', (v) => `${count(v)} ms`],
  ['prompt_tokens', 'Input tokens', count],
  ['cached_tokens', 'Cached input tokens', count],
  ['completion_tokens', 'Output tokens', count],
  ['cost_usd', 'Cost', money],
  ['cost_micro_usd', 'Cost (micro-USD)', count],
  ['cost_estimated', 'Cost estimated', (v) => (v ? 'yes: the upstream reported no usage; the gateway counted it' : 'no: reported by the upstream')],
  ['overrun_usd', 'Overrun (recorded, not charged)', money],
];

function StatusBadge({ status }) {
  return <Badge kind={status >= 500 ? 'bad' : status >= 400 ? 'warn' : 'ok'}>{status}</Badge>;
}

function Cost({ r }) {
  return (
    <>
      {money(r.cost_usd)}
      {r.cost_estimated && (
        <Badge kind="warn" title="Estimated: the upstream reported no usage">
          est.
        </Badge>
      )}
      {r.overrun_usd > 0 && <Badge kind="bad">overrun {money(r.overrun_usd)}</Badge>}
    </>
  );
}

export function Record({ r }) {
  return (
    <dl class="record" data-request-id={r.request_id}>
      {FIELDS.map(([k, label, f]) => (
        <>
          <dt>{label}</dt>
          <dd class={k === 'request_id' || k === 'key_id' ? 'mono' : ''}>
            {k === 'status' ? <StatusBadge status={r.status} /> : r[k] === null || r[k] === undefined ? '—' : f ? f(r[k]) : String(r[k])}
            {k === 'cost_usd' && r.cost_estimated && <Badge kind="warn">estimated</Badge>}
            {k === 'overrun_usd' && r.overrun_usd > 0 && <Badge kind="bad">overrun</Badge>}
          </dd>
        </>
      ))}
    </dl>
  );
}

function Lookup({ initial }) {
  const [text, setText] = useState(initial || '');
  const [state, setState] = useState({ record: null, error: null, busy: false });
  const find = async (e) => {
    e && e.preventDefault();
    const id = requestIdIn(text);
    if (!id) {
      setState({ record: null, error: { message: 'Paste a request id, or an error message that ends with “(request id: …)”.' }, busy: false });
      return;
    }
    setState({ record: null, error: null, busy: true });
    try {
      setState({ record: await api('GET', `/admin/usage/${encodeURIComponent(id)}`), error: null, busy: false });
    } catch (err) {
      setState({ record: null, error: err, busy: false });
    }
  };
  return (
    <section class="card">
      <form class="toolbar" onSubmit={find}>
        <h2>Find a request</h2>
        <input
          class="grow"
          name="request-id"
          placeholder="Request id, or the whole error message"
          aria-label="Request id or error message"
          value={text}
          onInput={(e) => setText(e.currentTarget.value)}
        />
        <button type="submit" class="primary" disabled={state.busy}>
          Find
        </button>
      </form>
      <ErrorBox error={state.error} title="No such request" />
      {state.record && <Record r={state.record} />}
    </section>
  );
}

export function RequestsPage({ params }) {
  const filters = {
    key: params.key || '',
    group: params.group || '',
    model: params.model || '',
    status: params.status || '',
    from: params.from || '',
    to: params.to || '',
    limit: params.limit || '100',
  };
  const [draft, setDraft] = useState(filters);
  const [open, setOpen] = useState(null);
  const keys = useLoad(() => api('GET', '/admin/keys'), []);
  const groups = useLoad(() => api('GET', '/admin/groups'), []);
  const groupList = groups.data ? groups.data.data : [];
  const recs = useLoad(() => api('GET', `/admin/usage${query(filters)}`), [JSON.stringify(filters)]);
  const keyList = keys.data ? keys.data.data : [];
  const apply = (e) => {
    e.preventDefault();
    go('requests', { ...draft, id: params.id });
  };
  const field = (name) => ({ value: draft[name], onInput: (e) => setDraft({ ...draft, [name]: e.currentTarget.value }) });
  const timeField = (name) => ({
    value: toLocalInput(draft[name]),
    onInput: (e) => setDraft({ ...draft, [name]: fromLocalInput(e.currentTarget.value) || '' }),
  });

  return (
    <section>
      <div class="toolbar">
        <h1>Requests</h1>
      </div>
      <Lookup initial={params.id} />
      <form class="filters card" onSubmit={apply} aria-label="Filters">
        <label>
          Key
          <select {...field('key')} onChange={(e) => setDraft({ ...draft, key: e.currentTarget.value })}>
            <option value="">All keys</option>
            {keyList.map((k) => (
              <option value={k.id}>{k.name ? `${k.name} (${k.key_display})` : k.key_display}</option>
            ))}
          </select>
        </label>
        <label>
          Group
          <select {...field('group')} onChange={(e) => setDraft({ ...draft, group: e.currentTarget.value })}>
            <option value="">All groups</option>
            {groupList.map((g) => (
              <option value={g.id}>{g.name && g.name !== g.id ? `${g.name} (${g.id})` : g.id}</option>
            ))}
            {draft.group && !groupList.some((g) => g.id === draft.group) && <option value={draft.group}>{draft.group}</option>}
          </select>
        </label>
        <label>
          Model
          <input name="model" placeholder="any" {...field('model')} />
        </label>
        <label>
          Status
          <select {...field('status')} onChange={(e) => setDraft({ ...draft, status: e.currentTarget.value })}>
            <option value="">Any</option>
            <option value="ok">Succeeded</option>
            <option value="error">Failed (400 and up)</option>
            <option value="4xx">4xx</option>
            <option value="5xx">5xx</option>
            <option value="429">429</option>
          </select>
        </label>
        <label>
          From
          <input type="datetime-local" {...timeField('from')} />
        </label>
        <label>
          To
          <input type="datetime-local" {...timeField('to')} />
        </label>
        <label>
          Show
          <select {...field('limit')} onChange={(e) => setDraft({ ...draft, limit: e.currentTarget.value })}>
            <option value="50">50</option>
            <option value="100">100</option>
            <option value="500">500</option>
            <option value="1000">1000</option>
          </select>
        </label>
        <div class="actions">
          <button type="button" onClick={recs.reload} disabled={recs.loading}>
            Refresh
          </button>
          <button type="submit" class="primary">
            Apply
          </button>
        </div>
      </form>
      <ErrorBox error={groups.error} title="The groups could not be loaded" />
      <ErrorBox error={recs.error} title="The requests could not be loaded" />
      {recs.data && !recs.data.data.length && <Empty>No request matches.</Empty>}
      {recs.data && recs.data.data.length > 0 && (
        <div class="table-wrap">
          <table class="cards" aria-label="Requests">
            <thead>
              <tr>
                <th>Arrived</th>
                <th>Key</th>
                <th>Model</th>
                <th>Status</th>
                <th class="num">Tokens in / out</th>
                <th class="num">Cost</th>
                <th class="num">Latency</th>
                <th>Request id</th>
              </tr>
            </thead>
            <tbody>
              {recs.data.data.map((r) => (
                <tr data-request-id={r.request_id}>
                  <td data-label="Arrived">{time(r.created_at)}</td>
                  <td data-label="Key">
                    <a href={href('requests', { ...filters, key: r.key_id })}>{r.key_name || r.key_display || r.key_id}</a>
                  </td>
                  <td data-label="Model">
                    {r.model}
                    <div class="muted small">
                      {r.endpoint}
                      {r.channel ? ` · ${r.channel}` : ''}
                    </div>
                  </td>
                  <td data-label="Status">
                    <StatusBadge status={r.status} />
                  </td>
                  <td data-label="Tokens in / out" class="num">
                    {count(r.prompt_tokens)} / {count(r.completion_tokens)}
                  </td>
                  <td data-label="Cost" class="num">
                    <Cost r={r} />
                  </td>
                  <td data-label="Latency" class="num">
                    {count(r.latency_ms)} ms
                  </td>
                  <td data-label="Request id">
                    <button class="link mono" onClick={() => setOpen(r)}>
                      {r.request_id}
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {open && (
        <Dialog title="Request" onClose={() => setOpen(null)}>
          <Record r={open} />
        </Dialog>
      )}
    </section>
  );
}
