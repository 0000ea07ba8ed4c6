import type { FastifyDynamicSwaggerOptions, SwaggerTransform } from '@fastify/swagger';
import { Type } from '@sinclair/typebox';
import type { KeyPermission } from '../db/schema.ts';
import { ErrorBody } from './error-schema.ts';
import { POSTWIRE_VERSION } from '../lib/version.ts';

// The top of the OpenAPI 3.1 document; paths and schemas come from the routes' TypeBox schemas.
export const openApiInfo = {
  openapi: '3.1.0',
  info: {
    title: 'Postwire API',
    // The package's version, so a generated client says which server release it was made from.
    version: POSTWIRE_VERSION,
    description:
      'Self-hostable email API: templates, sending and signed webhooks. Every /v1 route takes `Authorization: Bearer <API_KEY>`.',
    license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
  },
  servers: [{ url: '/' }],
  tags: [
    { name: 'Webhooks', description: 'Endpoints that receive signed delivery and engagement events.' },
    {
      name: 'Events',
      description: 'What happened to your email: the event log, and the catalogue of event kinds.',
    },
    { name: 'Suppressions', description: 'Addresses that are never sent to, per project.' },
    {
      name: 'Contacts',
      description: 'The people broadcasts go to: address, names, unsubscribed, property values.',
    },
    { name: 'Contact properties', description: 'The custom properties a project declares for its contacts.' },
    {
      name: 'Segments',
      description: 'Named lists of contacts, which contacts are added to and removed from.',
    },
    {
      name: 'Topics',
      description:
        'What contacts subscribe to, with a default for those who made no choice; each contact’s choices.',
    },
    {
      name: 'Inbound messages',
      description: 'Bounce, delay and success reports and complaints mailed back about your email.',
    },
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
    {
      name: 'API keys',
      description:
        "A project's keys and what each may do: `full_access`, `sending_access` (optionally one domain) or `read_only`.",
    },
    {
      name: 'Logs',
      description:
        'The API requests the project’s keys made: method, path, status, time, key and excerpts of the bodies.',
    },
    {
      name: 'Health',
      description: 'Liveness and readiness probes for load balancers and orchestrators; no API key.',
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
  // Every /v1 operation is behind the API key; the public ones (the health probes) say `security: []`.
  security: [{ bearerAuth: [] }],
};

const PERMISSION_SENTENCES: Record<KeyPermission, string> = {
  full_access:
    'Permission: `full_access` (a sending_access or read_only key gets 403 `insufficient_permission`).',
  sending_access:
    'Permission: `sending_access` or `full_access` (a read_only key gets 403 `insufficient_permission`).',
  read_only:
    'Permission: `read_only` or `full_access` (a sending_access key gets 403 `insufficient_permission`).',
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
  const next: typeof schema & { 'x-permission'?: KeyPermission } = { ...schema };
  // The auth hook lets `config.public` routes through without a key; the document must not ask for one.
  if (route.config?.public) next.security = [];
  else {
    // The permission the auth hook asks of the key (http/auth.ts), as an extension for tools and a sentence
    // for readers.
    const permission = route.config?.permission ?? 'full_access';
    next['x-permission'] = permission;
    next.description = `${(schema.description as string | undefined) ?? ''}${schema.description ? '\n\n' : ''}${PERMISSION_SENTENCES[permission]}`;
  }

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

type Json = Record<string, unknown>;

// Keywords whose values are data, not schemas: a `title` inside them names nothing.
const VALUE_KEYWORDS = new Set(['const', 'enum', 'default', 'example', 'examples']);

/**
 * Every schema with a `title` becomes `components.schemas[title]`, and each place that used it a `$ref` to
 * it, so code generators give resources, envelopes and bodies their names instead of inlining anonymous
 * shapes. Route schemas stay plain TypeBox objects (validation and serialization never see a `$ref`); the
 * naming happens only here, on the rendered document. Two different schemas with one title are a defect,
 * refused when the document is built.
 */
export function nameSchemas(doc: Json): Json {
  const components = ((doc.components ??= {}) as Json).schemas as Json | undefined;
  const schemas: Json = { ...components };
  const named = new Map<string, string>();

  // `root`: the schema itself is a component, or a response's schema, whose `description` swagger has
  // already made the response's description (so it says which response, not what the schema is).
  const walk = (node: unknown, root?: 'component' | 'response'): unknown => {
    if (Array.isArray(node)) return node.map((item) => walk(item));
    if (!node || typeof node !== 'object') return node;
    const out: Json = {};
    for (const [key, value] of Object.entries(node)) {
      if (VALUE_KEYWORDS.has(key)) out[key] = value;
      else if ((key === 'properties' || key === 'patternProperties' || key === '$defs') && isObject(value)) {
        out[key] = Object.fromEntries(Object.entries(value).map(([name, child]) => [name, walk(child)]));
      } else out[key] = walk(value);
    }
    const title = out.title;
    if (root === 'component' || typeof title !== 'string') return out;
    if (root === 'response') delete out.description;
    const { description, ...shape } = out;
    const text = JSON.stringify(shape);
    const existing = named.get(title);
    if (existing !== undefined && existing !== text) {
      throw new Error(`Two different schemas are titled '${title}'; a title names one component.`);
    }
    if (existing === undefined && schemas[title] !== undefined) {
      throw new Error(`The schema titled '${title}' collides with the shared schema of that name.`);
    }
    named.set(title, text);
    // The schema's own description, wherever one use of it kept it.
    if (description !== undefined || existing === undefined) schemas[title] = out;
    return { $ref: `#/components/schemas/${title}` };
  };

  for (const [name, schema] of Object.entries(schemas)) schemas[name] = walk(schema, 'component');
  for (const item of Object.values((doc.paths ?? {}) as Record<string, Json>)) {
    for (const [method, operation] of Object.entries(item)) {
      if (!isObject(operation)) continue;
      // An action whose body requires no field (publish, render, test, redeliver) may be sent without one:
      // swagger marks every body required, which would make generated clients send one.
      if (method === 'post' && isObject(operation.requestBody) && !requiresAField(operation.requestBody)) {
        operation.requestBody.required = false;
      }
      if (Array.isArray(operation.parameters)) {
        operation.parameters = operation.parameters.map((parameter: Json) => ({
          ...parameter,
          schema: walk(parameter.schema),
        }));
      }
      if (isObject(operation.requestBody)) {
        walkContent(operation.requestBody, withoutDefaults);
        walkContent(operation.requestBody, walk);
      }
      for (const response of Object.values((operation.responses ?? {}) as Record<string, Json>)) {
        walkContent(response, (schema) => walk(schema, 'response'));
      }
    }
  }
  for (const item of Object.values((doc.webhooks ?? {}) as Record<string, Record<string, Json>>)) {
    for (const operation of Object.values(item)) {
      if (isObject(operation.requestBody)) walkContent(operation.requestBody, walk);
    }
  }
  (doc.components as Json).schemas = Object.fromEntries(
    // Code-point order, not the locale's: the checked-in copy (sdk/openapi.json) must match on any machine.
    Object.entries(schemas).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
  );
  return doc;
}

/**
 * A request body's schema without `default`s. Generators (openapi-typescript) read a default as "always
 * present" and would make a client send the field; in a request it only says what the server assumes when
 * the field is left out, which each such field's description says in words.
 */
function withoutDefaults(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(withoutDefaults);
  if (!isObject(node)) return node;
  return Object.fromEntries(
    Object.entries(node)
      .filter(([key]) => key !== 'default')
      .map(([key, value]) => [
        key,
        VALUE_KEYWORDS.has(key)
          ? value
          : key === 'properties' && isObject(value)
            ? Object.fromEntries(Object.entries(value).map(([name, child]) => [name, withoutDefaults(child)]))
            : withoutDefaults(value),
      ]),
  );
}

/** Whether a request body's JSON schema requires any field. */
function requiresAField(requestBody: Json): boolean {
  const media = isObject(requestBody.content) ? requestBody.content['application/json'] : undefined;
  const schema = isObject(media) ? media.schema : undefined;
  return (
    !isObject(schema) ||
    schema.type !== 'object' ||
    (Array.isArray(schema.required) && schema.required.length > 0)
  );
}

function walkContent(holder: Json, walk: (node: unknown) => unknown): void {
  if (!isObject(holder.content)) return;
  for (const media of Object.values(holder.content)) {
    if (isObject(media) && media.schema !== undefined) media.schema = walk(media.schema);
  }
}

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * The options of @fastify/swagger. `webhooks` makes the document's `webhooks` section (the event-kinds
 * module's catalogue): given, so that the HTTP layer depends on no module.
 */
export const swaggerOptions = (webhooks: () => Json): FastifyDynamicSwaggerOptions => ({
  openapi: openApiInfo,
  // Shared schemas (`app.addSchema`) keep their `$id` as their component name (`#/components/schemas/Error`)
  // instead of swagger's default `def-0`, so generated clients get real type names.
  refResolver: {
    buildLocalReference: (json, _baseUri, _fragment, i) =>
      typeof json.$id === 'string' ? json.$id : `def-${i}`,
  },
  transform,
  transformObject: (input) => {
    const doc = ('openapiObject' in input ? input.openapiObject : input.swaggerObject) as unknown as Json;
    return nameSchemas({ ...doc, webhooks: webhooks() }) as never;
  },
});
