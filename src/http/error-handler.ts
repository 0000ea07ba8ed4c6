import type { ErrorObject } from 'ajv';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import FindMyWay, { type HTTPMethod } from 'find-my-way';
import { DomainError, type ErrorKind, RetryLaterError } from '../lib/errors.ts';
import { BODY_NOT_UTF8, BODY_TOO_DEEP, MAX_JSON_DEPTH } from './json-text.ts';

const STATUS_BY_KIND: Record<ErrorKind, number> = {
  invalid_request: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  validation: 422,
  payload_too_large: 413,
  unsupported_media_type: 415,
  rate_limited: 429,
  unavailable: 503,
};

export function sendError(
  request: FastifyRequest,
  reply: FastifyReply,
  status: number,
  code: string,
  message: string,
  param?: string,
): FastifyReply {
  const error = { code, message, ...(param !== undefined ? { param } : {}), request_id: String(request.id) };
  return reply.code(status).type('application/json; charset=utf-8').send({ error });
}

// Fastify's own errors that reach the handler, as the API names them.
const FASTIFY_ERRORS: Record<string, { status: number; code: string; message: string }> = {
  FST_ERR_CTP_INVALID_JSON_BODY: {
    status: 400,
    code: 'invalid_json',
    message: 'The body is not valid JSON.',
  },
  [BODY_NOT_UTF8]: {
    status: 400,
    code: 'invalid_json',
    message: 'The body is not valid UTF-8.',
  },
  [BODY_TOO_DEEP]: {
    status: 400,
    code: 'invalid_json',
    message: `The body nests arrays and objects more than ${MAX_JSON_DEPTH} levels deep.`,
  },
  FST_ERR_CTP_EMPTY_JSON_BODY: {
    status: 400,
    code: 'invalid_json',
    message: 'The body is empty but the content-type says JSON.',
  },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: {
    status: 400,
    code: 'invalid_request',
    message: 'The content-length does not match the body.',
  },
  FST_ERR_CTP_INVALID_MEDIA_TYPE: {
    status: 415,
    code: 'unsupported_media_type',
    message: 'Send the body as JSON with content-type: application/json.',
  },
};

const mebibytes = (bytes: number) => `${Math.round((bytes / 1024 / 1024) * 10) / 10} MiB`;

/**
 * The errors Fastify meets before a request reaches a route (Fastify's `frameworkErrors` option), in the
 * API's error body: a path whose percent-escapes are not UTF-8 (400), a path parameter over the router's
 * length limit (414).
 */
export function frameworkErrors(error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  reply.header('x-request-id', request.id);
  if (error.code === 'FST_ERR_MAX_PARAM_LENGTH') {
    sendError(request, reply, 414, 'uri_too_long', 'A path parameter is longer than any id or alias.');
    return;
  }
  sendError(
    request,
    reply,
    400,
    'invalid_request',
    'The path is not a valid URL: a %-escape in it does not decode to UTF-8 text.',
  );
}

/** Installs the one place where errors become HTTP responses, plus the 404 and 405 answers. */
export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (error instanceof DomainError) {
      if (error instanceof RetryLaterError) reply.header('retry-after', error.retryAfterSeconds);
      return sendError(request, reply, STATUS_BY_KIND[error.kind], error.code, error.message, error.param);
    }
    if (error.validation) {
      const { message, code, param } = describeValidationError(
        mostSpecificIssue(error.validation as ErrorObject[]),
        error.validationContext,
      );
      return sendError(request, reply, 422, code, message, param);
    }
    if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      // Fastify closes the connection at once, while the client is still sending: its kernel then resets
      // the connection and the client never reads the 413. Kept open, the server reads and drops the rest
      // of the body (bounded by the request timeout), and the client gets its answer.
      reply.removeHeader('connection');
      const limit = request.routeOptions.bodyLimit ?? 0;
      return sendError(request, reply, 413, 'body_too_large', `The body is larger than ${mebibytes(limit)}.`);
    }
    const known = error.code ? FASTIFY_ERRORS[error.code] : undefined;
    if (known) return sendError(request, reply, known.status, known.code, known.message);
    if (error instanceof SyntaxError || error.statusCode === 400) {
      return sendError(request, reply, 400, 'invalid_request', 'The request could not be read.');
    }
    request.log.error({ err: error }, 'unhandled error');
    return sendError(
      request,
      reply,
      500,
      'internal_error',
      'Something went wrong on our side; it has been logged.',
    );
  });

  // Fastify answers 404 for a known path with another method; an API says 405 and which methods exist.
  const knownPaths = FindMyWay({ ignoreTrailingSlash: false });
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const method of methods) {
      if (method === 'HEAD' || knownPaths.hasRoute(method as HTTPMethod, route.url)) continue;
      knownPaths.on(method as HTTPMethod, route.url, () => undefined);
    }
  });

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0] ?? '/';
    const allowed = (['GET', 'POST', 'PATCH', 'PUT', 'DELETE'] as HTTPMethod[]).filter((method) =>
      Boolean(knownPaths.find(method, path)),
    );
    if (allowed.length > 0) {
      reply.header('allow', allowed.join(', '));
      return sendError(
        request,
        reply,
        405,
        'method_not_allowed',
        `${request.method} is not allowed on ${path}.`,
      );
    }
    return sendError(request, reply, 404, 'route_not_found', `No route ${request.method} ${path}.`);
  });
}

function fieldPath(instancePath: string, extra?: string): string | undefined {
  const parts = instancePath.split('/').filter(Boolean);
  if (extra !== undefined) parts.push(extra);
  if (parts.length === 0) return undefined;
  return parts.reduce(
    (path, part) => (/^\d+$/.test(part) ? `${path}[${part}]` : path ? `${path}.${part}` : part),
    '',
  );
}

/** A value as an error message names it: strings as themselves, anything else as JSON. */
const valueText = (value: unknown): string => (typeof value === 'string' ? value : JSON.stringify(value));

/** "a, b or c". */
const either = (items: string[]): string =>
  items.length <= 1 ? (items[0] ?? '') : `${items.slice(0, -1).join(', ')} or ${items.at(-1)}`;

const TYPE_NAMES: Record<string, string> = {
  string: 'a string',
  integer: 'an integer',
  number: 'a number',
  boolean: 'a boolean (true or false)',
  array: 'an array',
  object: 'an object',
  null: 'null',
};
const typeName = (type: string): string => TYPE_NAMES[type] ?? `of type ${type}`;

const FORMAT_NAMES: Record<string, string> = {
  'date-time': 'an ISO 8601 date-time (2026-11-20T09:30:00Z)',
  date: 'a date (2026-11-20)',
  email: 'an email address',
  uri: 'a URL',
};
const formatName = (format: string): string => FORMAT_NAMES[format] ?? `in the format ${format}`;

const plural = (count: number, word: string): string => `${count} ${word}${count === 1 ? '' : 's'}`;

/**
 * What one validator issue says about its value, after "The field 'x' ", in words for a person rather than
 * the validator's; the allowed values of an enum or constant are always named.
 */
function issueDetail(issue: ErrorObject): string {
  const params = issue.params as Record<string, unknown>;
  const limit = Number(params.limit);
  switch (issue.keyword) {
    case 'type':
      return `must be ${either(String(params.type).split(',').map(typeName))}`;
    case 'enum':
      return `must be one of: ${(params.allowedValues as unknown[]).map(valueText).join(', ')}`;
    case 'const':
      return `must be ${valueText(params.allowedValue)}`;
    case 'minLength':
      return limit === 1 ? 'must not be empty' : `must be at least ${plural(limit, 'character')} long`;
    case 'maxLength':
      return `must be at most ${plural(limit, 'character')} long`;
    case 'minItems':
      return `must have at least ${plural(limit, 'item')}`;
    case 'maxItems':
      return `must have at most ${plural(limit, 'item')}`;
    case 'minProperties':
      return limit === 1 ? 'must not be empty' : `must have at least ${plural(limit, 'field')}`;
    case 'maxProperties':
      return `must have at most ${plural(limit, 'field')}`;
    case 'minimum':
      return `must be at least ${limit}`;
    case 'maximum':
      return `must be at most ${limit}`;
    case 'exclusiveMinimum':
      return `must be greater than ${limit}`;
    case 'exclusiveMaximum':
      return `must be less than ${limit}`;
    case 'pattern':
      return `must match the pattern ${String(params.pattern)}`;
    case 'format':
      return `must be ${formatName(String(params.format))}`;
    case 'uniqueItems':
      return `must not repeat an item (items ${String(params.j)} and ${String(params.i)} are the same)`;
    default:
      return issue.message ?? 'is invalid';
  }
}

/**
 * A union whose value matched none of its forms: when every form failed on the value itself for what it
 * is (a constant, an enum, a type, a format) rather than for something inside it, one issue saying every
 * form it could have taken ("must be one of: queued, sent", "must be a string or null", "must be an ISO
 * 8601 date-time or a date"); else undefined.
 */
function unionIssue(issues: ErrorObject[], union: ErrorObject): ErrorObject | undefined {
  const forms = issues.filter(
    (issue) =>
      issue !== union &&
      (issue.instancePath === union.instancePath || issue.instancePath.startsWith(`${union.instancePath}/`)),
  );
  if (forms.length === 0) return undefined;
  const values: unknown[] = [];
  const others: string[] = [];
  for (const form of forms) {
    const params = form.params as Record<string, unknown>;
    if (form.instancePath !== union.instancePath) return undefined;
    if (form.keyword === 'anyOf') continue; // a union nested in this one: its forms are listed too
    if (form.keyword === 'const') values.push(params.allowedValue);
    else if (form.keyword === 'enum' && Array.isArray(params.allowedValues))
      values.push(...params.allowedValues);
    else if (form.keyword === 'type' && params.type === 'null') values.push(null);
    else if (form.keyword === 'type' || form.keyword === 'format')
      others.push(issueDetail(form).slice('must be '.length));
    else return undefined;
  }
  // null is named last: "a string or null", "one of: a, b or null".
  const orNull = values.includes(null) && values.length + others.length > 1;
  const named = values.filter((value) => !orNull || value !== null).map(valueText);
  const kinds = [...new Set(others), ...(orNull ? ['null'] : [])];
  const message =
    kinds.length === 0
      ? named.length === 1
        ? `must be ${named[0]}`
        : `must be one of: ${named.join(', ')}`
      : `must be ${either([...(named.length > 1 ? [`one of: ${named.join(', ')}`] : named), ...kinds])}`;
  return { ...union, keyword: 'union', message };
}

/**
 * The issue to report. For a value matching none of a union's forms, the forms' own issues are the first
 * ones; when they are all about what the value is, they become one (`unionIssue`). Else the first issue is
 * that of the first form ("must be of type array") even when the value has another form's type and breaks
 * only its limits (a `to` that is a string too long): the issue of the form whose type it has says more.
 */
function mostSpecificIssue(issues: ErrorObject[]): ErrorObject | undefined {
  const union = issues.findLast((issue) => issue.keyword === 'anyOf');
  if (!union) return issues[0];
  return (
    unionIssue(issues, union) ??
    issues.find((issue) => issue.keyword !== 'type' && issue.keyword !== 'anyOf') ??
    issues[0]
  );
}

function describeValidationError(
  issue: ErrorObject | undefined,
  context: string | undefined,
): { message: string; code: string; param: string | undefined } {
  const where =
    context === 'querystring' ? 'query parameter' : context === 'params' ? 'path parameter' : 'field';
  if (!issue) return { message: 'The request is invalid.', code: 'parameter_invalid', param: undefined };
  const params = issue.params as Record<string, unknown>;
  if (issue.keyword === 'required') {
    const param = fieldPath(issue.instancePath, String(params.missingProperty));
    return { message: `The ${where} '${param}' is required.`, code: 'parameter_missing', param };
  }
  if (issue.keyword === 'additionalProperties') {
    const param = fieldPath(issue.instancePath, String(params.additionalProperty));
    return { message: `Unknown ${where} '${param}'.`, code: 'parameter_unknown', param };
  }
  const param = fieldPath(issue.instancePath);
  const detail = issue.keyword === 'union' ? (issue.message ?? 'is invalid') : issueDetail(issue);
  if (param === undefined) {
    const message =
      context === 'body'
        ? 'The request body must be a JSON object.'
        : `The request ${context ?? ''} ${detail}.`;
    return { message, code: 'parameter_invalid', param };
  }
  return { message: `The ${where} '${param}' ${detail}.`, code: 'parameter_invalid', param };
}
