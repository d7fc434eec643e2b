// Groups of keys: the list (search, status), create, edit, disable or enable, and delete
// with confirmation; one group's limits with what is used and left, and its keys. Every
// field comes from GROUP_FIELDS, through the same form as a key's.

import { useMemo, useState } from 'preact/hooks';
import { api } from '../api.js';
import { GROUP_FIELDS, TYPES, getPath, shown } from '../fields.js';
import { time } from '../format.js';
import { LimitsTable } from '../limits.jsx';
import { go, href } from '../nav.js';
import { Badge, Dialog, Empty, ErrorBox, UsageBar, useLoad } from '../ui.jsx';
import { Fields, RecordForm } from './keys.jsx';

const ENDPOINT = '/admin/groups';
const at = (id) => `${ENDPOINT}/${encodeURIComponent(id)}`;

const StatusBadge = ({ g }) => <Badge kind={g.status === 'enabled' ? 'ok' : 'off'}>{g.status}</Badge>;

function Cell({ f, g }) {
  if (f.name === 'status') return <StatusBadge g={g} />;
  const limit = getPath(g, f.name);
  if (f.used && limit !== null && limit !== undefined) {
    const used = getPath(g, f.used) || 0;
    return (
      <span class="budget">
        {TYPES[f.type].show(used)} of {shown(f, g)}
        <UsageBar used={used} limit={limit} />
      </span>
    );
  }
  return <span>{shown(f, g)}</span>;
}

function matches(g, search, status) {
  if (status !== 'all' && g.status !== status) return false;
  const s = search.trim().toLowerCase();
  return !s || [g.id, g.name].some((v) => v && v.toLowerCase().includes(s));
}

function Delete({ g, onDone, onCancel }) {
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const remove = async () => {
    setBusy(true);
    setError(null);
    try {
      await api('DELETE', at(g.id));
      onDone();
    } catch (e) {
      setError(e);
      setBusy(false);
    }
  };
  return (
    <Dialog title="Delete this group?" onClose={onCancel}>
      <p>
        The group <strong>{g.name || g.id}</strong> ({g.id}) and its limits will be gone. A group can be deleted only once no key belongs to it;
        its usage records stay.
      </p>
      <ErrorBox error={error} title="The group was not deleted" />
      <div class="actions">
        <button onClick={onCancel}>Keep it</button>
        <button class="danger" onClick={remove} disabled={busy}>
          {busy ? 'Deleting…' : 'Delete'}
        </button>
      </div>
    </Dialog>
  );
}

/** One group: its limits with what is used and left, its keys, and its settings. */
function GroupDetail({ id }) {
  const group = useLoad(() => api('GET', at(id)), [id]);
  const keys = useLoad(() => api('GET', '/admin/keys'), []);
  const [open, setOpen] = useState(null); // edit | delete
  const g = group.data;
  const byId = Object.fromEntries((keys.data ? keys.data.data : []).map((k) => [k.id, k]));
  return (
    <section>
      <div class="toolbar">
        <h1>{g ? `Group ${g.name || g.id}` : 'Group'}</h1>
        <a class="button" href={href('groups')}>
          All groups
        </a>
        {g && <button onClick={() => setOpen('edit')}>Edit</button>}
        <a class="button" href={href('spend', { group: id })}>
          Spend
        </a>
        <a class="button" href={href('requests', { group: id })}>
          Requests
        </a>
        <button onClick={group.reload} disabled={group.loading}>
          {group.loading ? 'Loading…' : 'Refresh'}
        </button>
        {g && (
          <button class="danger" onClick={() => setOpen('delete')}>
            Delete
          </button>
        )}
      </div>
      <ErrorBox error={group.error} title="The group could not be loaded" />
      <ErrorBox error={keys.error} title="The keys could not be loaded" />
      {g && (
        <>
          <section class="card">
            <h2>Limits now</h2>
            <p class="muted small">
              What all the group’s keys together have used and have left of each limit, and when it starts again. In flight now: {g.in_flight ?? 0}.
            </p>
            <LimitsTable rows={(g.limits || []).map((l) => ({ limit: l }))} label="Group limits" none="This group has no limit: it caps nothing." />
          </section>
          <section class="card">
            <h2>Keys in this group</h2>
            {!(g.keys || []).length ? (
              <Empty>No key belongs to this group. Pick it as a key’s group in the key’s form.</Empty>
            ) : (
              <ul class="plain" aria-label="Keys in this group">
                {g.keys.map((kid) => {
                  const k = byId[kid];
                  return (
                    <li data-key-id={kid}>
                      <a href={href('keys', { id: kid })}>{k ? k.name || k.key_display : kid}</a>{' '}
                      {k && <span class="muted small mono">{k.key_display}</span>}
                    </li>
                  );
                })}
              </ul>
            )}
          </section>
          <section class="card">
            <h2>Settings</h2>
            <p class="muted small">Created {time(g.created_at)}</p>
            <Fields fields={GROUP_FIELDS} record={g} />
          </section>
        </>
      )}
      {open === 'edit' && g && (
        <Dialog title={`Edit group ${g.name || g.id}`} onClose={() => setOpen(null)}>
          <RecordForm
            record={g}
            fields={GROUP_FIELDS}
            endpoint={ENDPOINT}
            noun="group"
            onSaved={() => {
              setOpen(null);
              group.reload();
            }}
            onCancel={() => setOpen(null)}
          />
        </Dialog>
      )}
      {open === 'delete' && g && <Delete g={g} onCancel={() => setOpen(null)} onDone={() => go('groups')} />}
    </section>
  );
}

function GroupList() {
  const groups = useLoad(() => api('GET', ENDPOINT), []);
  const [search, setSearch] = useState('');
  const [status, setStatus] = useState('all');
  const [open, setOpen] = useState(null); // {kind: create|edit|delete, g}
  const [error, setError] = useState(null);
  const list = groups.data ? groups.data.data : [];
  const shownGroups = useMemo(() => list.filter((g) => matches(g, search, status)), [list, search, status]);
  const columns = GROUP_FIELDS.filter((f) => f.list && f.name !== 'name');

  const toggle = async (g) => {
    setError(null);
    try {
      await api('PATCH', at(g.id), { status: g.status === 'enabled' ? 'disabled' : 'enabled' });
      groups.reload();
    } catch (e) {
      setError(e);
    }
  };
  const close = () => setOpen(null);
  const saved = () => {
    close();
    groups.reload();
  };

  return (
    <section>
      <div class="toolbar">
        <h1>Groups</h1>
        <input type="search" placeholder="Search id, name…" aria-label="Search groups" value={search} onInput={(e) => setSearch(e.currentTarget.value)} />
        <select aria-label="Status" value={status} onChange={(e) => setStatus(e.currentTarget.value)}>
          <option value="all">All statuses</option>
          <option value="enabled">Enabled</option>
          <option value="disabled">Disabled</option>
        </select>
        <button class="primary" onClick={() => setOpen({ kind: 'create' })}>
          New group
        </button>
      </div>
      <p class="muted small">A group’s limits hold for all its keys together, on top of each key’s own.</p>
      <ErrorBox error={groups.error} title="The groups could not be loaded" />
      <ErrorBox error={error} title="The group was not changed" />
      {groups.data && !list.length && <Empty>No groups yet. Create one to share limits between keys.</Empty>}
      {groups.data && list.length > 0 && !shownGroups.length && <Empty>No group matches.</Empty>}
      {shownGroups.length > 0 && (
        <div class="table-wrap">
          <table class="cards" aria-label="Groups">
            <thead>
              <tr>
                <th>Name</th>
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
              {shownGroups.map((g) => (
                <tr data-group-id={g.id}>
                  <td data-label="Name">
                    <a href={href('groups', { id: g.id })}>
                      <strong>{g.name || g.id}</strong>
                    </a>
                    <div class="muted small mono">{g.id}</div>
                  </td>
                  {columns.map((f) => (
                    <td data-label={f.label}>
                      <Cell f={f} g={g} />
                    </td>
                  ))}
                  <td data-label="Created">{time(g.created_at)}</td>
                  <td class="row-actions">
                    <a class="button" href={href('groups', { id: g.id })}>
                      Limits
                    </a>
                    <button onClick={() => setOpen({ kind: 'edit', g })}>Edit</button>
                    <button onClick={() => toggle(g)}>{g.status === 'enabled' ? 'Disable' : 'Enable'}</button>
                    <a class="button" href={href('spend', { group: g.id })}>
                      Spend
                    </a>
                    <button class="danger" onClick={() => setOpen({ kind: 'delete', g })}>
                      Delete
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {open && open.kind === 'create' && (
        <Dialog title="New group" onClose={close}>
          <RecordForm fields={GROUP_FIELDS} endpoint={ENDPOINT} noun="group" onSaved={saved} onCancel={close} />
        </Dialog>
      )}
      {open && open.kind === 'edit' && (
        <Dialog title={`Edit group ${open.g.name || open.g.id}`} onClose={close}>
          <RecordForm record={open.g} fields={GROUP_FIELDS} endpoint={ENDPOINT} noun="group" onSaved={saved} onCancel={close} />
        </Dialog>
      )}
      {open && open.kind === 'delete' && <Delete g={open.g} onCancel={close} onDone={saved} />}
    </section>
  );
}

export function GroupsPage({ params = {} }) {
  if (params.id) return <GroupDetail id={params.id} />;
  return <GroupList />;
}
