// Spend: cost, tokens or requests over time (hour or day buckets) by model, channel, key
// or group, for one key, one group or all of them, summed by the gateway; and what is
// left of each limit (cap, period budgets, tokens per minute, requests in flight) of the
// keys and of the group picked, with when each resets.

import { useMemo, useState } from 'preact/hooks';
import { api, query } from '../api.js';
import { Chart } from '../chart.jsx';
import { hasLimits } from '../fields.js';
import { count, money } from '../format.js';
import { LimitsTable } from '../limits.jsx';
import { go, href } from '../nav.js';
import { Empty, ErrorBox, useLoad } from '../ui.jsx';

/** How many keys' limits the spend page loads at most, one request each. */
const MAX_DETAILS = 50;

const GROUP_BY = { model: 'By model', channel: 'By channel', key: 'By key', group: 'By group' };

const RANGES = {
  hour: [
    ['24h', 24],
    ['3 days', 72],
    ['7 days', 168],
  ],
  day: [
    ['30 days', 30 * 24],
    ['90 days', 90 * 24],
    ['1 year', 365 * 24],
  ],
};

const MEASURES = {
  cost_usd: { label: 'Cost', format: money },
  tokens: { label: 'Tokens', format: count },
  requests: { label: 'Requests', format: count },
};

/**
 * What is left of each limit: of the one key or group picked, or of every key with a limit
 * (each key's detail holds its limits and its group's).
 */
function Budgets({ keys, only, group }) {
  const picked = only ? keys.filter((k) => k.id === only) : keys.filter((k) => hasLimits(k) && (!group || k.group === group));
  const ids = picked.slice(0, MAX_DETAILS).map((k) => k.id);
  const details = useLoad(
    () => Promise.all(ids.map((id) => api('GET', `/admin/keys/${encodeURIComponent(id)}`))),
    [ids.join(',')],
  );
  const groupDetail = useLoad(() => (group ? api('GET', `/admin/groups/${encodeURIComponent(group)}`) : Promise.resolve(null)), [group]);
  const name = (k) => k.name || k.key_display;
  // Until the details answer (or when they cannot), each key's lifetime cap from the list.
  const fallback = picked
    .filter((k) => k.quota_usd !== null && k.quota_usd !== undefined)
    .map((k) => ({
      owner: name(k),
      ownerId: k.id,
      limit: { limit: 'quota', kind: 'usd', limit_usd: k.quota_usd, used_usd: k.used_usd, left_usd: Math.max(0, k.quota_usd - k.used_usd) },
    }));
  const rows = details.data
    ? details.data.flatMap((k) =>
        (k.limits || [])
          .filter((l) => !(group && l.limit.startsWith('group.')))
          .map((l) => ({ owner: <a href={href('keys', { id: k.id })}>{name(k)}</a>, ownerId: k.id, limit: l })),
      )
    : fallback;
  return (
    <section class="card">
      <h2>Budgets left</h2>
      <ErrorBox error={details.error} title="The keys’ limits could not be loaded" />
      <ErrorBox error={groupDetail.error} title="The group’s limits could not be loaded" />
      {groupDetail.data && (
        <>
          <h3>
            Group <a href={href('groups', { id: group })}>{groupDetail.data.name || group}</a>, all its keys together
          </h3>
          <LimitsTable rows={groupDetail.data.limits.map((l) => ({ limit: l }))} label="Group limits" none="This group has no limit." />
          <h3>Its keys</h3>
        </>
      )}
      <LimitsTable
        rows={rows}
        label="Limits by key"
        none={only ? 'This key has no limit: its spend and rate are not capped.' : group ? 'No key of this group has a limit of its own.' : 'No key has a limit.'}
      />
      {picked.length > MAX_DETAILS && <p class="muted small">The first {MAX_DETAILS} keys with limits are shown; pick a key to see another.</p>}
    </section>
  );
}

export function SpendPage({ params }) {
  const key = params.key || '';
  const bucket = params.bucket === 'day' ? 'day' : 'hour';
  const hours = Number(params.hours) || RANGES[bucket][0][1];
  const group = params.group || '';
  const groupBy = GROUP_BY[params.group_by] ? params.group_by : 'model';
  const [measure, setMeasure] = useState('cost_usd');
  const set = (change) => go('spend', { key, group, bucket, hours, group_by: groupBy, ...change });

  const keys = useLoad(() => api('GET', '/admin/keys'), []);
  const groups = useLoad(() => api('GET', '/admin/groups'), []);
  const spend = useLoad(() => {
    const to = Date.now();
    return api(
      'GET',
      `/admin/spend${query({ key, group, bucket, group_by: groupBy, from: new Date(to - hours * 3600e3).toISOString(), to: new Date(to).toISOString(), utc_offset_minutes: -new Date().getTimezoneOffset() })}`,
    );
  }, [key, group, bucket, hours, groupBy]);

  const s = spend.data;
  const series = useMemo(() => (s ? s.series.map((x) => ({ name: x.name, values: x[measure] })) : []), [s, measure]);
  const keyList = keys.data ? keys.data.data : [];
  const groupList = groups.data ? groups.data.data : [];
  const groupName = (id) => {
    const g = groupList.find((x) => x.id === id);
    return g && g.name ? g.name : id;
  };
  const keyName = (id) => {
    const k = keyList.find((x) => x.id === id);
    return k ? k.name || k.key_display : id;
  };
  const m = MEASURES[measure];

  return (
    <section>
      <div class="toolbar">
        <h1>Spend</h1>
        <select aria-label="Key" value={key} onChange={(e) => set({ key: e.currentTarget.value })}>
          <option value="">All keys</option>
          {keyList.map((k) => (
            <option value={k.id}>{k.name ? `${k.name} (${k.key_display})` : k.key_display}</option>
          ))}
        </select>
        <select aria-label="Group" value={group} onChange={(e) => set({ group: e.currentTarget.value })}>
          <option value="">All groups</option>
          {groupList.map((g) => (
            <option value={g.id}>{g.name && g.name !== g.id ? `${g.name} (${g.id})` : g.id}</option>
          ))}
          {group && !groupList.some((g) => g.id === group) && <option value={group}>{group}</option>}
        </select>
        <select aria-label="Buckets" value={bucket} onChange={(e) => set({ bucket: e.currentTarget.value, hours: RANGES[e.currentTarget.value][0][1] })}>
          <option value="hour">By hour</option>
          <option value="day">By day</option>
        </select>
        <select aria-label="Range" value={hours} onChange={(e) => set({ hours: e.currentTarget.value })}>
          {RANGES[bucket].map(([label, h]) => (
            <option value={h}>{label}</option>
          ))}
        </select>
        <select aria-label="Group by" value={groupBy} onChange={(e) => set({ group_by: e.currentTarget.value })}>
          {Object.entries(GROUP_BY).map(([id, label]) => (
            <option value={id}>{label}</option>
          ))}
        </select>
        <button onClick={spend.reload} disabled={spend.loading}>
          {spend.loading ? 'Loading…' : 'Refresh'}
        </button>
      </div>
      <ErrorBox error={spend.error} title="Spend could not be loaded" />
      <ErrorBox error={keys.error} title="The keys could not be loaded" />
      <ErrorBox error={groups.error} title="The groups could not be loaded" />
      {s && (
        <>
          <div class="tiles">
            <div class="tile">
              <span>Cost</span>
              <strong data-total="cost">{money(s.totals.cost_usd)}</strong>
            </div>
            <div class="tile">
              <span>Requests</span>
              <strong data-total="requests">{count(s.totals.requests)}</strong>
            </div>
            <div class="tile">
              <span>Errors</span>
              <strong>{count(s.totals.errors)}</strong>
            </div>
            <div class="tile">
              <span>Tokens in / out</span>
              <strong>
                {count(s.totals.prompt_tokens)} / {count(s.totals.completion_tokens)}
              </strong>
            </div>
          </div>
          {s.truncated && <p class="notice">This range holds more records than one answer reads: the sums are too low. Narrow the range.</p>}
          {s.totals.estimated > 0 && (
            <p class="muted small">
              {count(s.totals.estimated)} of these requests have an estimated cost (the upstream reported no usage).
              {s.totals.overrun_usd > 0 && ` Overruns recorded, not charged: ${money(s.totals.overrun_usd)}.`}
            </p>
          )}
          <section class="card">
            <div class="toolbar">
              <h2>
                {m.label} per {bucket}, by {groupBy}
                {key ? ` · ${keyName(key)}` : ''}
                {group ? ` · group ${groupName(group)}` : ''}
              </h2>
              <div class="segmented" role="group" aria-label="Measure">
                {Object.entries(MEASURES).map(([id, x]) => (
                  <button aria-pressed={id === measure ? 'true' : 'false'} onClick={() => setMeasure(id)}>
                    {x.label}
                  </button>
                ))}
              </div>
            </div>
            {series.length ? (
              <Chart times={s.buckets} series={series} format={m.format} label={`${m.label} per ${bucket} by ${groupBy}`} />
            ) : (
              <Empty>No requests in this range.</Empty>
            )}
          </section>
          {s.groups.length > 0 && (
            <div class="table-wrap">
              <table class="cards" aria-label={`Totals by ${groupBy}`}>
                <thead>
                  <tr>
                    <th>{groupBy[0].toUpperCase() + groupBy.slice(1)}</th>
                    <th class="num">Requests</th>
                    <th class="num">Errors</th>
                    <th class="num">Tokens in</th>
                    <th class="num">Tokens out</th>
                    <th class="num">Cost</th>
                  </tr>
                </thead>
                <tbody>
                  {s.groups.map((g) => (
                    <tr data-group={g.name}>
                      <td data-label={groupBy}>
                        {groupBy === 'key' ? (
                          <a href={href('spend', { key: g.name, bucket, hours })}>{keyName(g.name)}</a>
                        ) : groupBy === 'group' ? (
                          g.name ? (
                            <a href={href('spend', { group: g.name, bucket, hours, group_by: 'key' })}>{groupName(g.name)}</a>
                          ) : (
                            <span class="muted">no group</span>
                          )
                        ) : (
                          g.name || '—'
                        )}
                      </td>
                      <td data-label="Requests" class="num">
                        {count(g.requests)}
                      </td>
                      <td data-label="Errors" class="num">
                        {count(g.errors)}
                      </td>
                      <td data-label="Tokens in" class="num">
                        {count(g.prompt_tokens)}
                      </td>
                      <td data-label="Tokens out" class="num">
                        {count(g.completion_tokens)}
                      </td>
                      <td data-label="Cost" class="num">
                        {money(g.cost_usd)}
                        {g.estimated > 0 && <span class="badge warn" title="Some costs are estimated">est.</span>}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </>
      )}
      {keys.data && <Budgets keys={keyList} only={key} group={group} />}
    </section>
  );
}
