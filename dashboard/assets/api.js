// The API client of the dashboard. The key lives in sessionStorage only: it ends with the tab, it is never
// put in a URL (so no server log, history entry or Referer carries it) and never in localStorage.
const STORAGE_KEY = 'postwire.apiKey';

export const session = {
  get key() {
    return sessionStorage.getItem(STORAGE_KEY);
  },
  signIn(key) {
    sessionStorage.setItem(STORAGE_KEY, key);
  },
  signOut() {
    sessionStorage.removeItem(STORAGE_KEY);
  },
};

/** A failed request, carrying the API's error body (`code`, `message`, `param`, `request_id`). */
export class ApiError extends Error {
  constructor(status, error) {
    super(error?.message || `The server answered ${status}.`);
    this.status = status;
    this.code = error?.code ?? 'http_error';
    this.param = error?.param ?? null;
    this.requestId = error?.request_id ?? null;
  }
}

const listeners = new Set();
/** Called with no arguments when the server refuses the key (revoked while signed in). */
export const onUnauthorized = (listener) => {
  listeners.add(listener);
  return () => listeners.delete(listener);
};

/**
 * `api('GET', '/webhooks')` → the parsed body; throws ApiError on any non-2xx answer (and on a network
 * failure, with a message that says so). `key` overrides the stored key (signing in checks one first).
 */
export async function api(method, path, body, { key = session.key } = {}) {
  const headers = { accept: 'application/json' };
  if (key) headers.authorization = `Bearer ${key}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  let response;
  try {
    response = await fetch(`/v1${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
      credentials: 'omit',
    });
  } catch {
    throw new ApiError(0, { code: 'network_error', message: 'Could not reach the Postwire server.' });
  }
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (!response.ok) {
    if (response.status === 401 && key === session.key) for (const listener of listeners) listener();
    throw new ApiError(response.status, parsed?.error);
  }
  return parsed;
}

/** A query string from the defined values of `params` ('' when none). */
export function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') search.set(name, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : '';
}
