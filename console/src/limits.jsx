// What is used and left of each limit of a key or a group, from the `limits` of its
// detail (GET /admin/keys/{id}, GET /admin/groups/{id}): money with when the period
// resets, tokens this minute, requests in flight.

import { count, money, time } from './format.js';
import { limitLabel } from './fields.js';
import { Empty, UsageBar } from './ui.jsx';

/** One limit as {used, left, of, resets, bar: [used, limit]}, in words. */
export function limitText(l) {
  if (l.kind === 'usd') {
    return {
      used: money(l.used_usd),
      left: money(l.left_usd),
      of: money(l.limit_usd),
      resets: l.resets_at ? time(l.resets_at) : 'never (over the whole life)',
      bar: [l.used_usd, l.limit_usd],
    };
  }
  if (l.kind === 'tokens_per_minute') {
    return {
      used: `${count(l.used_tokens)} tokens this minute`,
      left: `${count(l.left_tokens)} tokens`,
      of: `${count(l.limit_tokens)} per minute`,
      resets: 'every minute',
      bar: [l.used_tokens, l.limit_tokens],
    };
  }
  if (l.kind === 'requests_in_flight') {
    return {
      used: `${count(l.in_flight)} in flight`,
      left: `${count(l.left_requests)} requests`,
      of: `${count(l.limit_requests)} at once`,
      resets: 'as requests finish',
      bar: [l.in_flight, l.limit_requests],
    };
  }
  return { used: '—', left: '—', of: '—', resets: '—', bar: null };
}

/**
 * A table of limits. `rows` are {limit, owner?}: with owners (a key, a group) the table
 * has a first column naming each row's owner.
 */
export function LimitsTable({ rows, label, ownerLabel, none }) {
  if (!rows.length) return <Empty>{none || 'No limit: nothing is capped.'}</Empty>;
  const owners = rows.some((r) => r.owner);
  return (
    <div class="table-wrap">
      <table class="cards" aria-label={label || 'Limits'}>
        <thead>
          <tr>
            {owners && <th>{ownerLabel || 'Key'}</th>}
            <th>Limit</th>
            <th>Used</th>
            <th>Left</th>
            <th>Resets</th>
          </tr>
        </thead>
        <tbody>
          {rows.map(({ limit: l, owner, ownerId }) => {
            const t = limitText(l);
            return (
              <tr data-limit={l.limit} data-budget-key={ownerId}>
                {owners && <td data-label={ownerLabel || 'Key'}>{owner}</td>}
                <td data-label="Limit">{limitLabel(l.limit)}</td>
                <td data-label="Used" data-used>
                  {t.used}
                </td>
                <td data-label="Left" class="budget">
                  <strong>{t.left}</strong> left of {t.of}
                  {t.bar && <UsageBar used={t.bar[0]} limit={t.bar[1]} />}
                </td>
                <td data-label="Resets">{t.resets}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}
