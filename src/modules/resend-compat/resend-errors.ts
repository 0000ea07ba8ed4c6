import type { FastifyReply } from 'fastify';
import { DomainError } from '../../lib/errors.ts';

/** The error names Resend's SDK declares (RESEND_ERROR_CODE_KEY in resend@6): clients branch on them. */
export type ResendErrorName =
  | 'validation_error'
  | 'missing_required_field'
  | 'invalid_parameter'
  | 'invalid_attachment'
  | 'invalid_from_address'
  | 'invalid_idempotency_key'
  | 'invalid_idempotent_request'
  | 'concurrent_idempotent_requests'
  | 'missing_api_key'
  | 'invalid_api_key'
  | 'restricted_api_key'
  | 'not_found'
  | 'method_not_allowed'
  | 'rate_limit_exceeded'
  | 'daily_quota_exceeded'
  | 'application_error'
  | 'internal_server_error';

export interface ResendError {
  statusCode: number;
  name: ResendErrorName;
  message: string;
}

/** A 501 for what Resend has and Postwire does not, with why in `message`. */
export const notImplemented = (reply: FastifyReply, message: string): ResendError => {
  reply.code(501);
  return { statusCode: 501, name: 'application_error', message };
};

// Postwire's codes whose Resend name is not the one of their status.
const NAME_BY_CODE: Record<string, ResendErrorName> = {
  parameter_missing: 'missing_required_field',
  idempotency_key_reused: 'invalid_idempotent_request',
  idempotency_key_in_use: 'concurrent_idempotent_requests',
  daily_send_limit: 'daily_quota_exceeded',
  sender_domain_not_allowed: 'invalid_from_address',
  sender_domain_not_verified: 'invalid_from_address',
  // A scoped key without the permission a route needs, or sending from a domain it may not.
  insufficient_permission: 'restricted_api_key',
};

const NAME_BY_STATUS: Record<number, ResendErrorName> = {
  400: 'validation_error',
  401: 'invalid_api_key',
  403: 'restricted_api_key',
  404: 'not_found',
  405: 'method_not_allowed',
  409: 'invalid_parameter',
  413: 'validation_error',
  415: 'validation_error',
  422: 'validation_error',
  429: 'rate_limit_exceeded',
};

/**
 * Postwire's error body (`{ error: { code, message, param?, request_id } }`, from src/http/error-handler.ts, the
 * auth hook, idempotency…) as Resend answers errors: `{ statusCode, name, message }`, which its SDK hands to
 * the caller as `error`. Statuses stay Postwire's; only the body's shape and names change.
 */
export function toResendError(
  statusCode: number,
  error: { code: string; message: string; param?: string },
): ResendError {
  // A field at fault named with a batch index (`[2].from`) or not.
  const field = error.param?.replace(/^\[\d+\]\./, '');
  let name = NAME_BY_CODE[error.code] ?? NAME_BY_STATUS[statusCode];
  if (error.code === 'invalid_api_key' && error.message.startsWith('Missing API key'))
    name = 'missing_api_key';
  else if (statusCode === 422 && field === 'from') name = 'invalid_from_address';
  else if (statusCode === 422 && field?.startsWith('attachments')) name = 'invalid_attachment';
  return { statusCode, name: name ?? 'application_error', message: error.message };
}

/** A Postwire error body, as the error handler and hooks send it. */
export function isPostwireErrorBody(
  payload: unknown,
): payload is { error: { code: string; message: string } } {
  if (typeof payload !== 'object' || payload === null || !('error' in payload)) return false;
  const error = (payload as { error: unknown }).error;
  return (
    typeof error === 'object' &&
    error !== null &&
    typeof (error as { code?: unknown }).code === 'string' &&
    typeof (error as { message?: unknown }).message === 'string'
  );
}

/** A Resend field Postwire has no equivalent for, given a value: a 422 that says what to do instead. */
export const unsupportedField = (param: string, message: string): DomainError =>
  new DomainError('validation', 'parameter_unsupported', message, param);
