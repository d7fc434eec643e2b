// Addresses of the console's views: `#/page?param=value`.

export const PAGE_IDS = ['keys', 'groups', 'spend', 'requests', 'channels'];

export function parseHash() {
  const h = location.hash.replace(/^#\/?/, '');
  const [page, q = ''] = h.split('?');
  return { page: PAGE_IDS.includes(page) ? page : 'keys', params: Object.fromEntries(new URLSearchParams(q)) };
}

/** The address of a view; empty params are left out. */
export function href(page, params = {}) {
  const q = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== ''));
  const s = q.toString();
  return `#/${page}${s ? `?${s}` : ''}`;
}

export function go(page, params) {
  location.hash = href(page, params);
}
