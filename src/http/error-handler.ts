import type { ErrorObject } from 'ajv';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import FindMyWay, { type HTTPMethod } from 'find-my-way';
import { DomainError, type ErrorKind, RetryLaterError } from '../lib/errors.ts';
import { BODY_NOT_UTF8, BODY_TOO_DEEP, MAX_JSON_DEPTH } from './validation.ts';

const STATUS_BY_KIND: Record<ErrorKind, number> = {
  invalid_request: 400,
  unauthorized: 401,
  not_found: 404,
  conflict: 409,
  validation: 422,
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

/**
 * The issue to report. For a value matching none of a union's forms (a `to` that is an array or a
 * string), the first issue is that of the first form ("must be of type array") even when the value has
 * another form's type and breaks only its limits: the issue of the form whose type it has says more.
 */
function mostSpecificIssue(issues: ErrorObject[]): ErrorObject | undefined {
  if (!issues.some((issue) => issue.keyword === 'anyOf')) return issues[0];
  return issues.find((issue) => issue.keyword !== 'type' && issue.keyword !== 'anyOf') ?? issues[0];
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
  if (param === undefined) {
    const message =
      context === 'body'
        ? 'The request body must be a JSON object.'
        : `The request ${context ?? ''} ${issue.message}.`;
    return { message, code: 'parameter_invalid', param };
  }
  const detail =
    issue.keyword === 'type'
      ? `must be of type ${String(params.type)}`
      : issue.keyword === 'enum' && Array.isArray(params.allowedValues)
        ? `must be one of ${params.allowedValues.map(String).join(', ')}`
        : (issue.message ?? 'is invalid');
  return { message: `The ${where} '${param}' ${detail}.`, code: 'parameter_invalid', param };
}
