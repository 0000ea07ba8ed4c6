/** The API's error body: `{ error: { code, message, param?, request_id } }`. */
export interface ApiErrorBody {
  error: { code: string; message: string; param?: string; request_id: string };
}

/**
 * An error answer from the API. `code` is stable (branch on it), `message` is for a person, `param` names
 * the field at fault when there is one, and `request_id` (also the `x-request-id` header) finds the request
 * in the server's logs.
 */
export class PostwireError extends Error {
  readonly status: number;
  readonly code: string;
  readonly param: string | undefined;
  readonly request_id: string | undefined;

  constructor(status: number, body: ApiErrorBody['error'] | undefined, requestId?: string | null) {
    super(body?.message ?? `The API answered ${status}.`);
    this.name = new.target.name;
    this.status = status;
    this.code = body?.code ?? 'unknown_error';
    this.param = body?.param;
    this.request_id = body?.request_id ?? requestId ?? undefined;
  }
}

/** 400, 405, 413, 415: the request could not be read as sent (malformed JSON, too large, not JSON). */
export class InvalidRequestError extends PostwireError {}
/** 401: no API key, not the Bearer scheme, or an unknown or revoked key (the message says which). */
export class AuthenticationError extends PostwireError {}
/** 403: the key's permission does not take this call (`insufficient_permission`; the message names it). */
export class PermissionError extends PostwireError {}
/** 404: no such resource in this key's project. */
export class NotFoundError extends PostwireError {}
/** 409: conflicts with the current state (a disabled webhook, an alias taken, a request in progress). */
export class ConflictError extends PostwireError {}
/** 422: the body or a parameter breaks the schema or a rule; `param` names it. */
export class ValidationError extends PostwireError {}
/** 429: rate limit or daily send limit; `retryAfter` is in seconds. */
export class RateLimitError extends PostwireError {
  readonly retryAfter: number | undefined;
  constructor(
    status: number,
    body: ApiErrorBody['error'] | undefined,
    requestId: string | null,
    retryAfter: number | undefined,
  ) {
    super(status, body, requestId);
    this.retryAfter = retryAfter;
  }
}
/** 5xx: something failed on the server's side. */
export class ServerError extends PostwireError {}

/** No answer at all (the connection failed or was cut), after the retries. */
export class ConnectionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ConnectionError';
  }
}

/** The typed error for an error answer. */
export function errorFor(response: Response, body: unknown): PostwireError {
  const detail = isErrorBody(body) ? body.error : undefined;
  const requestId = response.headers.get('x-request-id');
  const status = response.status;
  if (status === 401) return new AuthenticationError(status, detail, requestId);
  if (status === 403) return new PermissionError(status, detail, requestId);
  if (status === 404) return new NotFoundError(status, detail, requestId);
  if (status === 409) return new ConflictError(status, detail, requestId);
  if (status === 422) return new ValidationError(status, detail, requestId);
  if (status === 429) {
    const header = response.headers.get('retry-after');
    const retryAfter = header === null ? Number.NaN : Number(header);
    return new RateLimitError(
      status,
      detail,
      requestId,
      Number.isFinite(retryAfter) ? retryAfter : undefined,
    );
  }
  if (status >= 500) return new ServerError(status, detail, requestId);
  return new InvalidRequestError(status, detail, requestId);
}

function isErrorBody(body: unknown): body is ApiErrorBody {
  const error = (body as { error?: unknown } | null)?.error;
  return (
    typeof error === 'object' && error !== null && typeof (error as { code?: unknown }).code === 'string'
  );
}
