// Channels and models: each channel's protocol, models and mapping from the
// configuration, and each model's price. When the gateway reports channel health
// (`GET /admin/channels`), a health column shows each channel's state; a gateway without
// that endpoint shows none.

import { api } from '../api.js';
import { count } from '../format.js';
import { Badge, Empty, ErrorBox, useLoad } from '../ui.jsx';

/** Health by channel name, or null when the gateway has no health endpoint. */
async function loadHealth() {
  try {
    const d = await api('GET', '/admin/channels');
    const list = Array.isArray(d) ? d : d.data || d.channels || [];
    return Object.fromEntries(list.filter((c) => c && c.name).map((c) => [c.name, c]));
  } catch (e) {
    if (e.status === 404) return null;
    throw e;
  }
}

function Health({ h }) {
  if (!h) return <span class="muted">unknown</span>;
  const state = h.state ?? h.health ?? h.status;
  const text = typeof state === 'string' ? state : JSON.stringify(state);
  const kind = /^(up|ok|healthy|closed|available)$/i.test(text) ? 'ok' : /^(down|open|unhealthy|failing)$/i.test(text) ? 'bad' : 'warn';
  return <Badge kind={kind}>{text}</Badge>;
}

const perM = (v) => (v === undefined ? '—' : `$${v}`);

function Price({ p }) {
  const parts = [];
  if (p.per_image) parts.push(...Object.entries(p.per_image).map(([size, usd]) => `$${usd} per image (${size})`));
  if (p.per_million_chars !== undefined) parts.push(`$${p.per_million_chars} per 1M characters`);
  if (p.per_minute !== undefined) parts.push(`$${p.per_minute} per minute`);
  if (p.per_second !== undefined) parts.push(`$${p.per_second} per second`);
  return parts.length ? parts.join(' · ') : '—';
}

export function ChannelsPage() {
  const catalog = useLoad(() => api('GET', '/admin/catalog'), []);
  const health = useLoad(loadHealth, []);
  const c = catalog.data;
  const showHealth = !!health.data;
  const prices = c ? Object.entries(c.prices) : [];
  return (
    <section>
      <div class="toolbar">
        <h1>Channels</h1>
        <button
          onClick={() => {
            catalog.reload();
            health.reload();
          }}
        >
          Refresh
        </button>
      </div>
      <ErrorBox error={catalog.error} title="The configuration could not be loaded" />
      <ErrorBox error={health.error} title="Channel health could not be loaded" />
      {c && !c.channels.length && <Empty>No channel is configured.</Empty>}
      {c && c.channels.length > 0 && (
        <div class="table-wrap">
          <table class="cards" aria-label="Channels">
            <thead>
              <tr>
                <th>Channel</th>
                <th>Protocol</th>
                <th>Models</th>
                <th class="num">Priority</th>
                <th class="num">Weight</th>
                {showHealth && <th>Health</th>}
              </tr>
            </thead>
            <tbody>
              {c.channels.map((ch) => (
                <tr data-channel={ch.name}>
                  <td data-label="Channel">
                    <strong>{ch.name}</strong>
                  </td>
                  <td data-label="Protocol">{ch.protocol}</td>
                  <td data-label="Models">
                    {ch.models.map((m) => (
                      <span class="chip">
                        {m}
                        {ch.model_map[m] ? ` → ${ch.model_map[m]}` : ''}
                      </span>
                    ))}
                  </td>
                  <td data-label="Priority" class="num">
                    {ch.priority}
                  </td>
                  <td data-label="Weight" class="num">
                    {ch.weight}
                  </td>
                  {showHealth && (
                    <td data-label="Health">
                      <Health h={health.data[ch.name]} />
                    </td>
                  )}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {c && (
        <section class="card">
          <h2>Prices</h2>
          <p class="muted small">USD per million tokens unless marked.</p>
          {!prices.length ? (
            <Empty>No model has a price.</Empty>
          ) : (
            <div class="table-wrap">
              <table class="cards" aria-label="Prices">
                <thead>
                  <tr>
                    <th>Model</th>
                    <th class="num">Input</th>
                    <th class="num">Cached input</th>
                    <th class="num">Output</th>
                    <th class="num">Max output tokens</th>
                    <th>Other units</th>
                  </tr>
                </thead>
                <tbody>
                  {prices.map(([model, p]) => (
                    <tr data-model={model}>
                      <td data-label="Model">{model}</td>
                      <td data-label="Input" class="num">
                        {perM(p.input)}
                      </td>
                      <td data-label="Cached input" class="num">
                        {perM(p.cached_input)}
                      </td>
                      <td data-label="Output" class="num">
                        {perM(p.output)}
                      </td>
                      <td data-label="Max output tokens" class="num">
                        {p.max_output_tokens ? count(p.max_output_tokens) : 'default'}
                      </td>
                      <td data-label="Other units">
                        <Price p={p} />
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </section>
      )}
    </section>
  );
}
