// Domain errors: services throw these; src/http/error-handler.ts is the one place that maps them to HTTP.

export type ErrorKind =
  | 'invalid_request'
  | 'unauthorized'
  | 'forbidden'
  | 'not_found'
  | 'conflict'
  | 'validation'
  | 'payload_too_large'
  | 'unsupported_media_type'
  | 'rate_limited'
  | 'unavailable';

export class DomainError extends Error {
  readonly kind: ErrorKind;
  readonly code: string;
  readonly param: string | undefined;

  constructor(kind: ErrorKind, code: string, message: string, param?: string) {
    super(message);
    this.name = 'DomainError';
    this.kind = kind;
    this.code = code;
    this.param = param;
  }
}

/**
 * A refusal that passes: the answer says when to try again (`retry-after`): 429 when the caller asked too
 * much, 503 when the server could not do it now.
 */
export class RetryLaterError extends DomainError {
  readonly retryAfterSeconds: number;
  constructor(
    code: string,
    message: string,
    retryAfterSeconds: number,
    kind: 'rate_limited' | 'unavailable' = 'rate_limited',
  ) {
    super(kind, code, message);
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

export const notFound = (resource: string, id: string): DomainError =>
  new DomainError('not_found', 'resource_missing', `No ${resource} with id '${id}'.`, 'id');

export const invalidParam = (param: string, message: string, code = 'parameter_invalid'): DomainError =>
  new DomainError('validation', code, message, param);

export const conflict = (code: string, message: string, param?: string): DomainError =>
  new DomainError('conflict', code, message, param);
