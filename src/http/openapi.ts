import type { FastifyDynamicSwaggerOptions, SwaggerTransform } from '@fastify/swagger';
import { Type } from '@sinclair/typebox';
import { ErrorBody } from './error-schema.ts';

// The top of the OpenAPI 3.1 document; paths and schemas come from the routes' TypeBox schemas.
export const openApiInfo = {
  openapi: '3.1.0',
  info: {
    title: 'Postwire API',
    version: '1.0.0',
    description:
      'Self-hostable email API: templates, sending and signed webhooks. Every /v1 route takes `Authorization: Bearer <API_KEY>`.',
  },
  servers: [{ url: '/' }],
  tags: [
    { name: 'Webhooks', description: 'Endpoints that receive signed delivery and engagement events.' },
    { name: 'Events', description: 'The catalogue of event kinds a webhook can subscribe to.' },
    { name: 'Templates', description: 'Message templates, their drafts and published versions.' },
    {
      name: 'Domains',
      description: 'Sending domains: their DKIM keys, the DNS records to publish, and verification.',
    },
    {
      name: 'Emails',
      description:
        'Sending email: accepted (202), then delivered in the background, with events on webhooks.',
    },
  ],
  components: {
    securitySchemes: {
      bearerAuth: {
        type: 'http' as const,
        scheme: 'bearer',
        description: 'A project API key, shown once when it is created.',
      },
    },
  },
  // Every documented operation is a /v1 route behind the API key; the public ones say `security: []`.
  security: [{ bearerAuth: [] }],
};

const SUCCESS_DESCRIPTIONS: Record<string, string> = {
  200: 'OK.',
  201: 'Created.',
  202: 'Accepted for later processing.',
};

// Documentation only (validation never sees it), so it can carry the header's conventional spelling.
const IdempotencyKeyHeader = Type.Object({
  'Idempotency-Key': Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 255,
      description:
        'Retry-safe POST: the same key and body within 24 h answer the first response again (`idempotent-replayed: true`).',
    }),
  ),
});

/**
 * Adds to each operation what app-wide hooks do rather than the route's own schema, so the document says
 * what the server really does. It only changes the copy swagger renders: validation and serialization keep
 * using the route's schema.
 */
const transform: SwaggerTransform = ({ schema, url, route }) => {
  if (!schema) return { schema, url };
  const next = { ...schema };
  // The auth hook lets `config.public` routes through without a key; the document must not ask for one.
  if (route.config?.public) next.security = [];

  const response = { ...(schema.response as Record<string, Record<string, unknown>> | undefined) };
  for (const [status, body] of Object.entries(response)) {
    // Without a description swagger writes "Default Response", which tells a reader nothing.
    if (body && body.description === undefined && SUCCESS_DESCRIPTIONS[status]) {
      response[status] = { ...body, description: SUCCESS_DESCRIPTIONS[status] };
    }
  }

  // installIdempotency reads this header on every authenticated POST and can answer 409 (in progress) and
  // 422 (key reused with another body); 422 is already in every route's error responses.
  const methods = Array.isArray(route.method) ? route.method : [route.method];
  if (methods.includes('POST') && !route.config?.public) {
    const headers = next.headers as { properties?: Record<string, unknown> } | undefined;
    next.headers = headers?.properties
      ? { ...headers, properties: { ...IdempotencyKeyHeader.properties, ...headers.properties } }
      : (headers ?? IdempotencyKeyHeader);
    response[409] ??= Type.Ref(ErrorBody, {
      description: 'Conflicts with the current state, or a request with this Idempotency-Key is in progress.',
    });
  }
  // The error handler answers any unexpected failure with a 500 in the Error shape (details only in the log).
  if (Object.keys(response).length > 0) {
    response[500] ??= Type.Ref(ErrorBody, {
      description: 'Something failed on our side; the body says nothing more and the error is logged.',
    });
    next.response = response;
  }
  return { schema: next, url };
};

export const swaggerOptions: FastifyDynamicSwaggerOptions = {
  openapi: openApiInfo,
  // Shared schemas (`app.addSchema`) keep their `$id` as their component name (`#/components/schemas/Error`)
  // instead of swagger's default `def-0`, so generated clients get real type names.
  refResolver: {
    buildLocalReference: (json, _baseUri, _fragment, i) =>
      typeof json.$id === 'string' ? json.$id : `def-${i}`,
  },
  transform,
};
