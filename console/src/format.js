// How numbers, money and times read on every page.

const usd = new Intl.NumberFormat('en-US', {
  style: 'currency',
  currency: 'USD',
  minimumFractionDigits: 2,
  maximumFractionDigits: 6,
});
const int = new Intl.NumberFormat('en-US');

export const money = (v) => (v === null || v === undefined ? '—' : usd.format(v));
export const count = (v) => (v === null || v === undefined ? '—' : int.format(v));

export function time(v) {
  if (v === null || v === undefined || v === '') return '—';
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? String(v) : d.toLocaleString();
}

/** `2025-01-31T14:05` for a datetime-local input, in the viewer's time zone. */
export function toLocalInput(v) {
  if (!v) return '';
  const d = new Date(v);
  if (Number.isNaN(d.getTime())) return '';
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}

/** A datetime-local value (the viewer's time) as RFC 3339 with its UTC offset. */
export function fromLocalInput(s) {
  if (!s) return null;
  const d = new Date(s);
  return Number.isNaN(d.getTime()) ? undefined : d.toISOString();
}

/** The share of `limit` that `used` is, 0..1. */
export const share = (used, limit) => (limit > 0 ? Math.min(1, Math.max(0, used / limit)) : used > 0 ? 1 : 0);
