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
  // A FormData (a file upload) goes as multipart/form-data, its boundary set by the browser.
  const form = typeof FormData !== 'undefined' && body instanceof FormData;
  if (body !== undefined && !form) headers['content-type'] = 'application/json';
  let response;
  try {
    response = await fetch(`/v1${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : form ? body : JSON.stringify(body),
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

/**
 * Downloads what `GET /v1<path>` answers as the file `filename`. The API needs the key in the Authorization
 * header, so a plain link cannot fetch it: the bytes are fetched here, kept as a Blob and saved through a
 * temporary `blob:` link with `download`. The Blob is typed application/octet-stream whatever it holds, so
 * the browser saves it and never renders it in the dashboard's origin. Throws ApiError like `api`.
 */
export async function download(path, filename, { key = session.key } = {}) {
  let response;
  try {
    response = await fetch(`/v1${path}`, {
      headers: key ? { authorization: `Bearer ${key}` } : {},
      cache: 'no-store',
      credentials: 'omit',
    });
  } catch {
    throw new ApiError(0, { code: 'network_error', message: 'Could not reach the Postwire server.' });
  }
  if (!response.ok) {
    let error = null;
    try {
      error = (await response.json())?.error;
    } catch {
      error = null;
    }
    if (response.status === 401 && key === session.key) for (const listener of listeners) listener();
    throw new ApiError(response.status, error);
  }
  const blob = new Blob([await response.arrayBuffer()], { type: 'application/octet-stream' });
  const url = URL.createObjectURL(blob);
  const link = document.createElement('a');
  link.href = url;
  link.download = filename;
  link.rel = 'noopener';
  document.body.append(link);
  link.click();
  link.remove();
  // The click starts the download; the URL goes once it surely has been read.
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}
