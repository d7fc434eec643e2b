// Spend: cost, tokens or requests over time (hour or day buckets) by model, channel or
// key, for one key or all of them, summed by the gateway; and what is left of each
// budget (every key field with a `used` in KEY_FIELDS).

import { useMemo, useState } from 'preact/hooks';
import { api, query } from '../api.js';
import { Chart } from '../chart.jsx';
import { BUDGETS, getPath } from '../fields.js';
import { count, money } from '../format.js';
import { go, href } from '../nav.js';
import { Empty, ErrorBox, UsageBar, useLoad } from '../ui.jsx';

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

function Budgets({ keys, only }) {
  const rows = keys.filter((k) => (!only || k.id === only) && BUDGETS.some((f) => getPath(k, f.name) !== null && getPath(k, f.name) !== undefined));
  if (!BUDGETS.length) return null;
  return (
    <section class="card">
      <h2>Budgets left</h2>
      {!rows.length ? (
        <Empty>{only ? 'This key has no budget: its spend is not capped.' : 'No key has a budget.'}</Empty>
      ) : (
        <div class="table-wrap">
          <table class="cards">
            <thead>
              <tr>
                <th>Key</th>
                {BUDGETS.map((f) => (
                  <th>{f.label}</th>
                ))}
              </tr>
            </thead>
            <tbody>
              {rows.map((k) => (
                <tr data-budget-key={k.id}>
                  <td data-label="Key">
                    <a href={href('spend', { key: k.id })}>{k.name || k.key_display}</a>
                  </td>
                  {BUDGETS.map((f) => {
                    const limit = getPath(k, f.name);
                    if (limit === null || limit === undefined) return <td data-label={f.label}>{f.empty}</td>;
                    const used = getPath(k, f.used) || 0;
                    return (
                      <td data-label={f.label} class="budget">
                        <strong>{money(Math.max(0, limit - used))}</strong> left of {money(limit)}
                        <UsageBar used={used} limit={limit} />
                      </td>
                    );
                  })}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

export function SpendPage({ params }) {
  const key = params.key || '';
  const bucket = params.bucket === 'day' ? 'day' : 'hour';
  const hours = Number(params.hours) || RANGES[bucket][0][1];
  const groupBy = ['model', 'channel', 'key'].includes(params.group_by) ? params.group_by : 'model';
  const [measure, setMeasure] = useState('cost_usd');
  const set = (change) => go('spend', { key, bucket, hours, group_by: groupBy, ...change });

  const keys = useLoad(() => api('GET', '/admin/keys'), []);
  const spend = useLoad(() => {
    const to = Date.now();
    return api(
      'GET',
      `/admin/spend${query({ key, bucket, group_by: groupBy, from: new Date(to - hours * 3600e3).toISOString(), to: new Date(to).toISOString(), utc_offset_minutes: -new Date().getTimezoneOffset() })}`,
    );
  }, [key, bucket, hours, groupBy]);

  const s = spend.data;
  const series = useMemo(() => (s ? s.series.map((x) => ({ name: x.name, values: x[measure] })) : []), [s, measure]);
  const keyList = keys.data ? keys.data.data : [];
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
          <option value="model">By model</option>
          <option value="channel">By channel</option>
          <option value="key">By key</option>
        </select>
        <button onClick={spend.reload} disabled={spend.loading}>
          {spend.loading ? 'Loading…' : 'Refresh'}
        </button>
      </div>
      <ErrorBox error={spend.error} title="Spend could not be loaded" />
      <ErrorBox error={keys.error} title="The keys could not be loaded" />
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
                      <td data-label={groupBy}>{groupBy === 'key' ? <a href={href('spend', { key: g.name, bucket, hours })}>{keyName(g.name)}</a> : g.name || '—'}</td>
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
      {keys.data && <Budgets keys={keyList} only={key} />}
    </section>
  );
}
