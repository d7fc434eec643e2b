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
//   used    dotted path of what is used of this limit: the key list shows it with a bar
//   limit   the name this field's limit has in a detail's `limits` (`budget.day`): the
//           pages that show what is left of each limit take its label from here
//   choices (type `choice`), min (types `usd`, `count`), suggest (type `text`: a
//           function giving values to offer), nullable (type `text`: empty sends null),
//   load    (type `ref`): an async function giving the [{value, label}] to pick from
//   create  only set on creation (a group's id); shown, not editable, afterwards

import { api } from './api.js';
import { fromLocalInput, money, count, time, toLocalInput } from './format.js';

const zones = () => (typeof Intl.supportedValuesOf === 'function' ? ['UTC', ...Intl.supportedValuesOf('timeZone')] : ['UTC']);

/** Every group, as choices for a key's `group`. */
export async function groupChoices() {
  const d = await api('GET', '/admin/groups');
  return d.data.map((g) => ({ value: g.id, label: g.name && g.name !== g.id ? `${g.name} (${g.id})` : g.id }));
}

/** The limits keys and groups share: period budgets, a token rate, concurrency. */
const policyFields = (whose) => [
  {
    name: 'budget_day_usd',
    label: 'Daily budget (USD)',
    type: 'usd',
    min: 0,
    limit: 'budget.day',
    help: `Spend allowed per calendar day, in ${whose} time zone. Empty means no daily budget.`,
    empty: 'no daily budget',
  },
  {
    name: 'budget_week_usd',
    label: 'Weekly budget (USD)',
    type: 'usd',
    min: 0,
    limit: 'budget.week',
    help: 'Spend allowed per calendar week (Monday to Sunday). Empty means no weekly budget.',
    empty: 'no weekly budget',
  },
  {
    name: 'budget_month_usd',
    label: 'Monthly budget (USD)',
    type: 'usd',
    min: 0,
    limit: 'budget.month',
    help: 'Spend allowed per calendar month. Empty means no monthly budget.',
    empty: 'no monthly budget',
  },
  {
    name: 'tpm',
    label: 'Tokens per minute',
    type: 'count',
    min: 1,
    limit: 'tpm',
    help: 'Tokens (input and output) allowed per minute. Empty means no limit.',
    empty: 'no limit',
  },
  {
    name: 'max_concurrent',
    label: 'Concurrent requests',
    type: 'count',
    min: 1,
    limit: 'max_concurrent',
    help: 'Requests allowed in flight at once. Empty means no limit.',
    empty: 'no limit',
  },
  {
    name: 'time_zone',
    label: 'Time zone',
    type: 'text',
    nullable: true,
    suggest: zones,
    help: 'Where the budgets’ days, weeks and months begin: an IANA name such as Europe/Paris, or UTC. Empty uses the gateway’s.',
    empty: 'the gateway’s',
  },
];

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
    limit: 'quota',
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
  ...policyFields('the key’s'),
  {
    name: 'group',
    label: 'Group',
    type: 'ref',
    load: groupChoices,
    help: 'The key’s requests must fit its group’s limits as well as its own. Pick none for no group.',
    empty: 'no group',
    list: true,
  },
];

/** The fields of a group of keys: the same description, for the groups page. */
export const GROUP_FIELDS = [
  {
    name: 'id',
    label: 'Id',
    type: 'text',
    create: true,
    help: 'How keys name the group: 1 to 64 letters, digits, `_`, `-` or `.`. It cannot change.',
  },
  { name: 'name', label: 'Name', type: 'text', help: 'What the group is for. Empty uses the id.', empty: 'unnamed', list: true },
  {
    name: 'status',
    label: 'Status',
    type: 'choice',
    choices: ['enabled', 'disabled'],
    help: 'Every key of a disabled group is refused until it is enabled again.',
    list: true,
  },
  {
    name: 'quota_usd',
    label: 'Spend cap (USD)',
    type: 'usd',
    min: 0,
    help: 'Total spend allowed to all the group’s keys together. Empty means no cap.',
    empty: 'no cap',
    used: 'used_usd',
    limit: 'quota',
    list: true,
  },
  ...policyFields('the group’s').map((f) => (f.name === 'budget_day_usd' ? { ...f, list: true } : f)),
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
    parse: (s, f) => ({ value: s.trim() || (f.nullable ? null : '') }),
    show: (v) => v || '',
  },
  ref: {
    input: 'select',
    toInput: (v) => v ?? '',
    parse: (s) => ({ value: s || null }),
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

/** Whether a record has any limit (a cap, a budget, a rate or a group's). */
export const hasLimits = (record, fields = KEY_FIELDS) =>
  fields.some((f) => f.limit && getPath(record, f.name) !== null && getPath(record, f.name) !== undefined) || !!record.group;

/** A limit's name in a detail's `limits` in words: `group.budget.day` → "Group: Daily budget". */
export function limitLabel(name) {
  const group = name.startsWith('group.');
  const base = group ? name.slice('group.'.length) : name;
  const f = KEY_FIELDS.find((x) => x.limit === base);
  const label = f ? f.label.replace(/ \(USD\)$/, '') : base;
  return group ? `Group: ${label}` : label;
}

/** Which of `fields` an API error's `param` names (`allow_ips[1]` → `allow_ips`). */
export function fieldOf(param, fields = KEY_FIELDS) {
  if (!param) return null;
  const base = param.replace(/\[\d+\]$/, '');
  return fields.find((f) => f.name === base || base.startsWith(`${f.name}.`))?.name ?? null;
}
