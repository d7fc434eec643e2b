// Talking to the admin API. The admin token lives in this tab's sessionStorage only (gone
// when the tab closes) and goes out as a bearer header: never a cookie, so no other site
// can make the browser send it. Every failure becomes an ApiError whose message is words
// a person can act on, never a blank page.

const TOKEN = 'model-gateway.admin-token';

export const session = {
  token: () => sessionStorage.getItem(TOKEN),
  signIn: (t) => sessionStorage.setItem(TOKEN, t),
  signOut: () => sessionStorage.removeItem(TOKEN),
};

export class ApiError extends Error {
  constructor(status, message, { param = null, code = null } = {}) {
    super(message);
    this.status = status;
    this.param = param;
    this.code = code;
  }
}

// Called when the token is refused, so the shell can go back to the sign-in form. A
// refusal that comes before the shell has registered (a page's first load can answer
// before the shell's effects run) is kept and reported on registration.
let refusedEarly = false;
let onRefused = () => {
  refusedEarly = true;
};
export const whenRefused = (f) => {
  onRefused = f;
  if (refusedEarly) {
    refusedEarly = false;
    f();
  }
};

async function call(method, path, body, token) {
  const headers = { Authorization: `Bearer ${token}`, Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
      credentials: 'omit',
    });
  } catch (e) {
    throw new ApiError(0, `The gateway could not be reached (${e.message}). Is it running, and is this its admin address?`);
  }
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    // Not JSON: a proxy's error page, say. Reported below in words.
  }
  if (!res.ok) {
    const e = data && data.error;
    const message =
      (e && e.message) ||
      `The gateway answered ${res.status}${res.statusText ? ` ${res.statusText}` : ''} without an explanation.`;
    throw new ApiError(res.status, message, { param: e && e.param, code: e && e.code });
  }
  if (data === null) {
    throw new ApiError(res.status, `The gateway answered ${res.status} with something that is not JSON.`);
  }
  return data;
}

/** An admin API call with the session's token; a refused token signs the session out. */
export async function api(method, path, body) {
  try {
    return await call(method, path, body, session.token() || '');
  } catch (e) {
    if (e.status === 401) {
      session.signOut();
      onRefused(e);
    }
    throw e;
  }
}

/** Checks a token before keeping it. */
export const tryToken = (token) => call('GET', '/admin/keys', undefined, token);

export const query = (params) => {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, v);
  }
  const s = q.toString();
  return s ? `?${s}` : '';
};
