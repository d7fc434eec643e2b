// The fields of a key, described once. The key form, the key list, the key's detail and
// the budgets on the spend page are all drawn from this list: a new key field in the
// admin API (a period budget, a token rate, a group) is one more entry here.
//
// An entry:
//   name    dotted path in the admin API's key record and in create/update bodies
//           (`budgets.day` reads record.budgets.day and sends {"budgets": {"day": …}})
//   label, help   what the form shows
//   type    one of TYPES below: how the value is edited, checked and shown
//   empty   what an empty value means, in words ("no cap")
//   list    shown as a column of the key list
//   used    dotted path of what is used of this limit: the spend page shows what is left
//   choices (type `choice`), min (types `usd`, `count`)

import { fromLocalInput, money, count, time, toLocalInput } from './format.js';

export const KEY_FIELDS = [
  { name: 'name', label: 'Name', type: 'text', help: 'Who or what uses the key.', empty: 'unnamed', list: true },
  {
    name: 'status',
    label: 'Status',
    type: 'choice',
    choices: ['enabled', 'disabled'],
    help: 'A disabled key is refused until it is enabled again.',
    list: true,
  },
  {
    name: 'models',
    label: 'Models',
    type: 'list',
    help: 'One model name per line. Empty allows every model.',
    empty: 'every model',
    list: true,
  },
  {
    name: 'quota_usd',
    label: 'Spend cap (USD)',
    type: 'usd',
    min: 0,
    help: 'Total spend allowed over the key’s life. Empty means no cap.',
    empty: 'no cap',
    used: 'used_usd',
    list: true,
  },
  {
    name: 'expires_at',
    label: 'Expires',
    type: 'time',
    help: 'The key stops working at this time (your local time). Empty means never.',
    empty: 'never',
    list: true,
  },
  {
    name: 'allow_ips',
    label: 'Allowed IPs',
    type: 'list',
    help: 'IP addresses or CIDR ranges (IPv4 or IPv6), one per line. Empty allows any address.',
    empty: 'any address',
  },
  {
    name: 'rpm',
    label: 'Requests per minute',
    type: 'count',
    min: 1,
    help: 'Requests allowed per minute. Empty means no limit.',
    empty: 'no limit',
  },
];

export function getPath(obj, path) {
  return path.split('.').reduce((o, k) => (o === null || o === undefined ? undefined : o[k]), obj);
}

export function setPath(obj, path, value) {
  const keys = path.split('.');
  let o = obj;
  for (const k of keys.slice(0, -1)) {
    if (typeof o[k] !== 'object' || o[k] === null) o[k] = {};
    o = o[k];
  }
  o[keys[keys.length - 1]] = value;
  return obj;
}

const number = (s, f, whole) => {
  const t = s.trim();
  if (t === '') return { value: null };
  const n = Number(t);
  if (!Number.isFinite(n) || (whole && !Number.isInteger(n))) {
    return { error: `${f.label} must be ${whole ? 'a whole number' : 'a number'}.` };
  }
  if (f.min !== undefined && n < f.min) return { error: `${f.label} must be at least ${f.min}.` };
  return { value: n };
};

// Per type: `input` (the form control), `toInput` (record value → control text),
// `parse` (control text → {value} or {error}), `show` (record value → text).
export const TYPES = {
  text: {
    input: 'text',
    toInput: (v) => v ?? '',
    parse: (s) => ({ value: s.trim() }),
    show: (v) => v || '',
  },
  choice: {
    input: 'select',
    toInput: (v) => v ?? '',
    parse: (s) => ({ value: s }),
    show: (v) => v ?? '',
  },
  list: {
    input: 'textarea',
    toInput: (v) => (v || []).join('\n'),
    parse: (s) => ({ value: s.split(/[\n,]/).map((x) => x.trim()).filter(Boolean) }),
    show: (v) => (v && v.length ? v.join(', ') : ''),
  },
  usd: {
    input: 'number',
    step: '0.01',
    toInput: (v) => (v === null || v === undefined ? '' : String(v)),
    parse: (s, f) => number(s, f, false),
    show: (v) => (v === null || v === undefined ? '' : money(v)),
  },
  count: {
    input: 'number',
    step: '1',
    toInput: (v) => (v === null || v === undefined ? '' : String(v)),
    parse: (s, f) => number(s, f, true),
    show: (v) => (v === null || v === undefined ? '' : count(v)),
  },
  time: {
    input: 'datetime-local',
    toInput: toLocalInput,
    parse: (s, f) => {
      const v = fromLocalInput(s);
      return v === undefined ? { error: `${f.label} is not a valid time.` } : { value: v };
    },
    show: (v) => (v ? time(v) : ''),
  },
};

/** A field's value of a record, as text ("no cap" when empty). */
export function shown(f, record) {
  const text = TYPES[f.type].show(getPath(record, f.name));
  return text === '' ? f.empty || '—' : text;
}

/** The fields that are limits with a usage: what the spend page shows as budgets. */
export const BUDGETS = KEY_FIELDS.filter((f) => f.used);

/** Which of `fields` an API error's `param` names (`allow_ips[1]` → `allow_ips`). */
export function fieldOf(param, fields = KEY_FIELDS) {
  if (!param) return null;
  const base = param.replace(/\[\d+\]$/, '');
  return fields.find((f) => f.name === base || base.startsWith(`${f.name}.`))?.name ?? null;
}
