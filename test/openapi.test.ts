import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import diagnostics from 'node:diagnostics_channel';
import { after, before, describe, it } from 'node:test';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { Type } from '@sinclair/typebox';
import swagger from '@fastify/swagger';
import Fastify, { type FastifyInstance, type RouteOptions } from 'fastify';
import { buildApp } from '../src/app.ts';
import { compileDeferredSchemas } from '../src/http/deferred-schemas.ts';
import { ErrorBody, errorResponses } from '../src/http/error-schema.ts';
import { nameSchemas, swaggerOptions } from '../src/http/openapi.ts';
import { openApiWebhooks } from '../src/modules/event-kinds/event-kinds.openapi.ts';
import { EVENT_KIND_NAMES } from '../src/modules/event-kinds/event-kinds.ts';
import { RESEND_PREFIX } from '../src/modules/resend-compat/resend.routes.ts';
import { testEventData } from '../src/modules/webhook-operations/webhook-operations.service.ts';
import {
  ALL_ENGINES,
  engineSkip,
  type TestApp,
  createTestDatabase,
  createTestServices,
  startTestApp,
} from './helpers/app.ts';
import { checkWebhookPayloads, installContractCheck } from './helpers/contract.ts';

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];
// `/` and `/dashboard/…`: the dashboard's page and files (they hold no data; the page asks for a key).
const PUBLIC_PATHS = ['/healthz', '/readyz', '/v1/openapi.json', '/docs', '/', '/dashboard'];
/** The documented operations that need no key: the health probes, for load balancers and orchestrators. */
const PUBLIC_OPERATIONS = ['GET /healthz', 'GET /readyz'];
/** Public and hidden, behind a token of its own (METRICS_TOKEN; test/metrics.test.ts): Prometheus reads it. */
const METRICS_PATH = '/metrics';
/** Public and hidden, behind the same operator token (docs/api/destinations.md; test/destinations.test.ts). */
const OPERATOR_PATH = '/v1/destinations';
/**
 * The engagement routes mail clients reach (images, redirects, pages) and the contacts' preference page:
 * public, and not JSON API operations.
 */
const MAIL_CLIENT_PATHS = ['/o', '/c', '/u', '/p'];

/** Every route the app registers, seen through Fastify's initialization channel before buildApp adds any. */
async function startRecordingRoutes(engine: Parameters<typeof startTestApp>[0]) {
  const routes: RouteOptions[] = [];
  const onInit = (message: unknown) => {
    (message as { fastify: FastifyInstance }).fastify.addHook('onRoute', (route) => {
      routes.push(route);
    });
  };
  diagnostics.subscribe('fastify.initialization', onInit);
  try {
    return { app: await startTestApp(engine), routes };
  } finally {
    diagnostics.unsubscribe('fastify.initialization', onInit);
  }
}

const openApiPath = (url: string) => url.replace(/:(\w+)(\([^)]*\))?/g, '{$1}');
const methodsOf = (route: RouteOptions) => (Array.isArray(route.method) ? route.method : [route.method]);

function operations(doc: any): { method: string; path: string; op: any }[] {
  return Object.entries(doc.paths as Record<string, any>).flatMap(([path, item]) =>
    Object.entries(item)
      .filter(([method]) => METHODS.includes(method))
      .map(([method, op]) => ({ method: method.toUpperCase(), path, op })),
  );
}

/** Every `$ref` in the document, with where it was found. */
function refs(node: unknown, at = '#'): { at: string; ref: string }[] {
  if (Array.isArray(node)) return node.flatMap((item, i) => refs(item, `${at}/${i}`));
  if (!node || typeof node !== 'object') return [];
  return Object.entries(node).flatMap(([key, value]) =>
    key === '$ref' && typeof value === 'string' ? [{ at, ref: value }] : refs(value, `${at}/${key}`),
  );
}

/** A schema with its `$ref` (to a component) followed, as a reader of the document would. */
function deref(doc: any, schema: any): any {
  return schema?.$ref ? deref(doc, resolvePointer(doc, schema.$ref)) : schema;
}

function resolvePointer(doc: any, ref: string): unknown {
  assert.ok(ref.startsWith('#/'), `${ref} is not a local reference`);
  return ref
    .slice(2)
    .split('/')
    .map((part) => decodeURIComponent(part).replaceAll('~1', '/').replaceAll('~0', '~'))
    .reduce((node: any, part) => node?.[part], doc);
}

/** An operation's request body schema: its JSON, or its multipart form's. */
const bodySchema = (op: any): unknown =>
  op.requestBody?.content?.['application/json']?.schema ??
  op.requestBody?.content?.['multipart/form-data']?.schema;

for (const engine of ALL_ENGINES) {
  describe(`openapi (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let routes: RouteOptions[];
    let doc: any;

    before(async () => {
      ({ app: api, routes } = await startRecordingRoutes(engine));
      const response = await api.request('GET', '/v1/openapi.json', { key: null });
      assert.equal(response.status, 200);
      doc = response.body;
    });
    after(() => api.close());

    it('serves the document as JSON without an API key', async () => {
      const response = await api.request('GET', '/v1/openapi.json', { key: null });
      assert.equal(response.status, 200);
      assert.match(response.headers.get('content-type') ?? '', /^application\/json/);
      assert.match(response.headers.get('x-request-id') ?? '', /^req_/);
      assert.equal(response.body.openapi, '3.1.0');
      assert.equal(response.body.info.title, 'Postwire API');
      assert.equal(typeof response.body.info.version, 'string');
    });

    it('serves the docs page as HTML without an API key', async () => {
      const response = await api.request('GET', '/docs', { key: null });
      assert.equal(response.status, 200);
      assert.match(response.headers.get('content-type') ?? '', /^text\/html/);
      assert.match(response.body, /swagger-ui/i);
    });

    it('documents every route the app registers, and hides only public ones', () => {
      const documented = new Set(operations(doc).map(({ method, path }) => `${method} ${path}`));
      const expected = new Set<string>();
      for (const route of routes) {
        const hidden = Boolean((route.schema as { hide?: boolean } | undefined)?.hide);
        for (const method of methodsOf(route)) {
          // Fastify adds a HEAD twin to each GET route; the document describes the GET.
          if (method === 'HEAD') continue;
          const key = `${method} ${openApiPath(route.url)}`;
          if (route.url === `${RESEND_PREFIX}/downloads`) {
            // A download link (a received message, an attachment) is signed and works without a key, as
            // Resend's do: the SDK's forward fetches it with a plain fetch (docs/api/resend.md).
            assert.ok(hidden && route.config?.public, `${key} is a hidden, public signed link`);
          } else if (hidden && route.url.startsWith(`${RESEND_PREFIX}/`)) {
            // The Resend-compatible API: Resend's shapes, not Postwire's, so outside the document (and the
            // SDK generated from it); docs/api/resend.md describes it. Behind the key like /v1.
            assert.ok(!route.config?.public, `${key} answers without an API key`);
            assert.ok(!documented.has(key), `${key} is hidden yet documented`);
          } else if (hidden) {
            // A hidden route is missing from the document, so it must be one a client needs no key for.
            assert.ok(route.config?.public, `${key} is hidden from the document but needs an API key`);
            assert.ok(
              [...PUBLIC_PATHS, ...MAIL_CLIENT_PATHS, METRICS_PATH, OPERATOR_PATH].some(
                (prefix) => route.url === prefix || route.url.startsWith(`${prefix}/`),
              ),
              `${key} is hidden but is not one of the public paths`,
            );
            assert.ok(!documented.has(key), `${key} is hidden yet documented`);
          } else {
            assert.ok(documented.has(key), `${key} is registered but not documented`);
            expected.add(key);
          }
        }
      }
      assert.deepEqual(
        [...documented].sort(),
        [...expected].sort(),
        'the document lists routes the app lacks',
      );
      // The routes every build has, so an empty recording cannot pass the loop above.
      for (const key of ['GET /v1/event-kinds', 'POST /v1/webhooks', 'PATCH /v1/webhooks/{webhook_id}']) {
        assert.ok(documented.has(key), `${key} is missing`);
      }
    });

    it('gives every operation a summary, tags, declared path parameters and described responses', () => {
      const ids = new Set<string>();
      for (const { method, path, op } of operations(doc)) {
        const name = `${method} ${path}`;
        assert.ok(typeof op.summary === 'string' && op.summary.length > 0, `${name} has no summary`);
        assert.ok(Array.isArray(op.tags) && op.tags.length > 0, `${name} has no tags`);
        if (op.operationId !== undefined) {
          assert.ok(!ids.has(op.operationId), `${name} repeats operationId ${op.operationId}`);
          ids.add(op.operationId);
        }
        const templated = [...path.matchAll(/\{(\w+)\}/g)].map((match) => match[1]).sort();
        const declared = (op.parameters ?? []).filter((p: any) => p.in === 'path');
        assert.deepEqual(declared.map((p: any) => p.name).sort(), templated, `${name} path parameters`);
        for (const parameter of declared) assert.equal(parameter.required, true, `${name} ${parameter.name}`);
        for (const parameter of op.parameters ?? []) {
          assert.ok(
            ['query', 'header', 'path', 'cookie'].includes(parameter.in),
            `${name} ${parameter.name}`,
          );
          assert.ok(parameter.schema, `${name} parameter ${parameter.name} has no schema`);
        }
        if (op.requestBody) {
          // JSON, or a multipart upload (a contact import's CSV) documented with its form's schema.
          assert.ok(bodySchema(op), `${name} body is neither JSON nor a multipart form`);
        }
        const statuses = Object.keys(op.responses ?? {});
        assert.ok(
          statuses.some((status) => /^2/.test(status)),
          `${name} documents no success response`,
        );
        for (const status of statuses) {
          const response = op.responses[status];
          assert.match(status, /^([1-5](\d\d|XX)|default)$/, `${name} status key ${status}`);
          assert.ok(response.description && response.description !== 'Default Response', `${name} ${status}`);
          // Bytes (a received message, an attachment) are documented as binary content; all else is JSON.
          const binary = Object.values<any>(response.content ?? {}).some(
            (media) => media.schema?.format === 'binary',
          );
          assert.ok(
            binary || response.content?.['application/json']?.schema,
            `${name} ${status} has no JSON schema`,
          );
        }
      }
    });

    it('names shared schemas after their $id and references Error from every error response', () => {
      const names = Object.keys(doc.components.schemas);
      assert.ok(names.includes('Error'), `components.schemas: ${names.join(', ')}`);
      for (const name of names) {
        assert.match(name, /^[a-zA-Z0-9._-]+$/);
        assert.doesNotMatch(name, /^def-\d+$/, `${name} is an anonymous component`);
      }
      assert.deepEqual(doc.components.schemas.Error.required, ['error']);
      assert.deepEqual(doc.components.schemas.Error.properties.error.required, [
        'code',
        'message',
        'request_id',
      ]);
      for (const { method, path, op } of operations(doc)) {
        for (const [status, response] of Object.entries<any>(op.responses)) {
          if (Number(status[0]) < 4 && status !== 'default') continue;
          // A readiness probe's 503 is its answer, not an error: the checks, with the one that failed.
          const expected = `${method} ${path} ${status}` === 'GET /readyz 503' ? 'Readiness' : 'Error';
          assert.deepEqual(
            response.content['application/json'].schema,
            { $ref: `#/components/schemas/${expected}` },
            `${method} ${path} ${status}`,
          );
        }
      }
      for (const { at, ref } of refs(doc)) {
        assert.ok(resolvePointer(doc, ref) !== undefined, `${at}: ${ref} does not resolve`);
      }
    });

    it('holds JSON Schema 2020-12 that compiles strictly', () => {
      const ajv = new Ajv2020({ strict: true, strictTypes: false, strictRequired: false });
      addFormats.default(ajv);
      // OpenAPI's own additions to the Schema Object.
      ajv.addVocabulary(['discriminator', 'xml', 'externalDocs', 'example']);
      const local = (node: unknown): unknown =>
        JSON.parse(
          JSON.stringify(node).replaceAll('"#/components/schemas/', '"urn:postwire:doc#/$defs/components/'),
        );
      // Components reference each other too.
      ajv.addSchema({ $id: 'urn:postwire:doc', $defs: { components: local(doc.components.schemas) } });
      for (const { method, path, op } of operations(doc)) {
        const schemas = [
          bodySchema(op),
          ...(op.parameters ?? []).map((p: any) => p.schema),
          ...Object.values<any>(op.responses).map((r) => r.content?.['application/json']?.schema),
        ].filter(Boolean);
        for (const schema of schemas) {
          assert.doesNotThrow(() => ajv.compile(local(schema) as object), `${method} ${path}`);
        }
      }
    });

    it('asks for the bearer key on every documented operation and on nothing public', async () => {
      assert.deepEqual(doc.components.securitySchemes.bearerAuth, {
        type: 'http',
        scheme: 'bearer',
        description: doc.components.securitySchemes.bearerAuth.description,
      });
      assert.deepEqual(doc.security, [{ bearerAuth: [] }]);
      for (const { method, path, op } of operations(doc)) {
        if (PUBLIC_OPERATIONS.includes(`${method} ${path}`)) {
          assert.deepEqual(op.security, [], `${method} ${path} says it needs no key`);
          assert.equal(op.responses['401'], undefined, `${method} ${path} documents no 401`);
          continue;
        }
        assert.ok(path.startsWith('/v1/'), `${method} ${path} is outside /v1`);
        // An operation-level `security: []` would tell clients no key is needed.
        if (op.security !== undefined)
          assert.deepEqual(op.security, [{ bearerAuth: [] }], `${method} ${path}`);
        assert.ok(op.responses['401'], `${method} ${path} does not document 401`);
        // The document says a key is needed; the server must agree.
        const url = path.replace(/\{\w+\}/g, 'missing_id');
        const response = await api.request(method, url, {
          key: null,
          body: method === 'GET' ? undefined : {},
        });
        assert.equal(response.status, 401, `${method} ${url} without a key`);
        assert.equal(response.body.error.code, 'invalid_api_key');
      }
      for (const path of PUBLIC_PATHS) {
        const response = await api.request('GET', path, { key: null });
        assert.equal(response.status, 200, `${path} without a key`);
      }
    });

    it("describes the seed's webhook operations with the seed's fields", () => {
      const webhookFields = ['id', 'url', 'enabled', 'events', 'created_at', 'updated_at', 'has_secret'];
      // The seed's fields, all required; additions are allowed, the write-only secret never is.
      const assertWebhook = (named: any, where: string) => {
        const schema = deref(doc, named);
        for (const field of webhookFields) {
          assert.ok(schema.properties[field], `${where}: no ${field}`);
          assert.ok(schema.required.includes(field), `${where}: ${field} is not required`);
        }
        assert.equal(schema.properties.secret, undefined, `${where} exposes the secret`);
      };
      const create = doc.paths['/v1/webhooks'].post;
      const createBody = deref(doc, create.requestBody.content['application/json'].schema);
      assert.equal(create.requestBody.required, true);
      for (const field of ['url', 'secret', 'enabled', 'events']) {
        assert.ok(createBody.properties[field], `POST body: no ${field}`);
      }
      assert.deepEqual([...createBody.required].sort(), ['events', 'url']);
      assert.equal(createBody.properties.enabled.type, 'boolean');
      assert.equal(createBody.properties.events.type, 'array');
      assert.equal(deref(doc, createBody.properties.events.items).type, 'string');
      const created = deref(doc, create.responses['201'].content['application/json'].schema);
      assertWebhook(created.properties.data, 'POST 201');
      assert.ok(create.parameters.some((p: any) => p.in === 'header' && /^idempotency-key$/i.test(p.name)));

      const update = doc.paths['/v1/webhooks/{webhook_id}'].patch;
      const updateBody = deref(doc, update.requestBody.content['application/json'].schema);
      for (const field of ['enabled', 'secret']) assert.ok(updateBody.properties[field], `PATCH ${field}`);
      assert.equal(updateBody.required, undefined, 'every PATCH field is optional');
      const updated = deref(doc, update.responses['200'].content['application/json'].schema);
      assertWebhook(updated.properties.data, 'PATCH 200');

      const list = deref(
        doc,
        doc.paths['/v1/webhooks'].get.responses['200'].content['application/json'].schema,
      );
      assert.deepEqual(list.properties.object.enum, ['list']);
      assertWebhook(list.properties.data.items, 'GET list');
      assert.ok(
        !JSON.stringify(deref(doc, list.properties.data.items)).includes('"secret"'),
        'a listed webhook never carries its secret',
      );
    });

    it("describes the seed's publish operation", () => {
      const publish = routes.find(
        (route) => methodsOf(route).includes('POST') && /^\/v1\/templates\/:\w+\/publish$/.test(route.url),
      );
      assert.ok(publish, 'POST /v1/templates/:id/publish is registered');
      const op = doc.paths[openApiPath(publish.url)].post;
      const body = deref(doc, op.requestBody.content['application/json'].schema);
      for (const field of ['name', 'subject', 'html', 'text']) {
        assert.equal(body.properties[field]?.type, 'string', `publish body ${field}`);
      }
      const success = Object.entries<any>(op.responses).find(([status]) => status.startsWith('2'));
      assert.ok(success, 'publish documents no success response');
      const answer = deref(doc, success[1].content['application/json'].schema);
      for (const field of ['object', 'id', 'published_at']) assert.ok(answer.properties[field], field);
    });
  });

  describe(`openapi for code generation (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let doc: any;
    before(async () => {
      api = await startTestApp(engine);
      doc = (await api.request('GET', '/v1/openapi.json', { key: null })).body;
    });
    after(() => api.close());

    it('gives every operation a unique camelCase operationId, a summary and a description', () => {
      const ids = operations(doc).map(({ method, path, op }) => {
        assert.match(op.operationId ?? '', /^[a-z][a-zA-Z0-9]*$/, `${method} ${path} operationId`);
        assert.ok(op.description?.length > 0, `${method} ${path} has no description`);
        return op.operationId;
      });
      assert.equal(new Set(ids).size, ids.length, `repeated operationIds: ${ids.join(', ')}`);
      for (const id of ['createWebhook', 'listWebhooks', 'publishTemplate', 'sendEmail', 'listEvents']) {
        assert.ok(ids.includes(id), `no ${id}`);
      }
    });

    it('makes query parameters that have a default optional', () => {
      for (const { method, path, op } of operations(doc)) {
        for (const parameter of op.parameters ?? []) {
          if (parameter.in !== 'query') continue;
          if (deref(doc, parameter.schema).default !== undefined) {
            assert.notEqual(parameter.required, true, `${method} ${path} ${parameter.name}`);
          }
        }
      }
      const limit = doc.paths['/v1/webhooks'].get.parameters.find((p: any) => p.name === 'limit');
      assert.deepEqual(
        { required: limit.required, default: limit.schema.default },
        { required: false, default: 100 },
      );
    });

    it('names every request body and every success body in components.schemas', () => {
      for (const { method, path, op } of operations(doc)) {
        const bodies = [
          ...(op.requestBody ? [['request', op.requestBody]] : []),
          ...Object.entries<any>(op.responses).filter(([status]) => /^[2-5]/.test(status)),
        ];
        for (const [what, holder] of bodies) {
          // Binary success bodies (bytes, not JSON) have no component to name.
          if (!holder.content['application/json']) continue;
          const schema = holder.content['application/json'].schema;
          assert.match(schema.$ref ?? '', /^#\/components\/schemas\/\w+$/, `${method} ${path} ${what}`);
        }
      }
      for (const name of ['Webhook', 'WebhookList', 'CreateWebhookRequest', 'Template', 'Email', 'Event']) {
        assert.ok(doc.components.schemas[name], `no component ${name}`);
      }
      // A list envelope names its items.
      assert.deepEqual(doc.components.schemas.WebhookList.properties.data.items, {
        $ref: '#/components/schemas/Webhook',
      });
    });

    it('describes event kinds as an enum built from the catalogue', () => {
      assert.deepEqual(doc.components.schemas.EventType.enum, EVENT_KIND_NAMES);
      const eventType = { $ref: '#/components/schemas/EventType' };
      assert.deepEqual(doc.components.schemas.Webhook.properties.events.items, eventType);
      assert.deepEqual(doc.components.schemas.CreateWebhookRequest.properties.events.items, eventType);
      assert.deepEqual(doc.components.schemas.Event.properties.type, eventType);
      const typeFilter = doc.paths['/v1/events'].get.parameters.find((p: any) => p.name === 'type');
      assert.deepEqual(typeFilter.schema, eventType);
    });

    it("describes each event kind's webhook payload and signature headers", () => {
      assert.deepEqual(Object.keys(doc.webhooks), EVENT_KIND_NAMES);
      for (const kind of EVENT_KIND_NAMES) {
        const op = doc.webhooks[kind].post;
        assert.deepEqual(
          op.parameters.map((p: any) => [p.in, p.name, p.required]),
          [
            ['header', 'webhook-id', true],
            ['header', 'webhook-timestamp', true],
            ['header', 'webhook-signature', true],
          ],
        );
        const payload = deref(doc, op.requestBody.content['application/json'].schema);
        assert.deepEqual(payload.required, ['id', 'type', 'created_at', 'data'], kind);
        assert.equal(payload.properties.type.const, kind);
        if (kind === 'email.received') {
          // Received mail is no email of ours: a received email's own fields.
          for (const field of [
            'received_email_id',
            'route_id',
            'from',
            'to',
            'subject',
            'recipient',
            'text',
            'html',
          ]) {
            assert.ok(payload.properties.data.properties[field], `${kind} data.${field}`);
          }
        } else if (kind.startsWith('email.')) {
          for (const field of ['email_id', 'from', 'to', 'subject', 'tags', 'recipient']) {
            assert.ok(payload.properties.data.properties[field], `${kind} data.${field}`);
          }
        }
      }
      const bounced = deref(
        doc,
        doc.webhooks['email.bounced'].post.requestBody.content['application/json'].schema,
      );
      assert.deepEqual(bounced.properties.data.properties.bounce, { $ref: '#/components/schemas/Bounce' });
    });

    it('checks webhook bodies against the webhooks section, strictly', () => {
      const event = {
        id: 'evt_01m8362j4ke00a6yqc5prman4d',
        type: 'email.bounced',
        created_at: '2026-11-23T10:00:00.000Z',
        data: {
          email_id: 'msg_01m8362j4ke00a6yqc5prman4d',
          from: 'a@example.com',
          to: ['b@example.org'],
          subject: 'Hi',
          tags: {},
          recipient: 'b@example.org',
          smtp_response: '550 5.1.1 no such user',
          bounce: {
            type: 'hard',
            status: '5.1.1',
            diagnostic: '550 5.1.1 no such user',
            reporting_mta: null,
          },
        },
      };
      const { recipient: _recipient, ...withoutRecipient } = event.data;
      const problems = checkWebhookPayloads(doc, [
        JSON.stringify(event),
        JSON.stringify({ ...event, data: withoutRecipient }),
        JSON.stringify({ ...event, data: { ...event.data, surprise: 1 } }),
        JSON.stringify({ ...event, type: 'email.exploded' }),
      ]);
      assert.equal(problems.length, 3, problems.join('\n'));
      assert.match(problems[0]!, /^email\.bounced: .*must have required property 'recipient'/);
      assert.match(problems[1]!, /^email\.bounced: .*must NOT have unevaluated properties/);
      assert.match(problems[2]!, /^email\.exploded: not in the document's webhooks section/);

      // The test event of every kind (POST /v1/webhooks/{id}/test) is shaped as documented.
      const samples = EVENT_KIND_NAMES.map((type) =>
        JSON.stringify({ ...event, type, data: testEventData(type) }),
      );
      assert.deepEqual(checkWebhookPayloads(doc, samples), []);
    });

    it("carries the package's version", () => {
      const manifest = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
      assert.equal(doc.info.version, manifest.version);
    });

    it('states the Apache-2.0 licence where a user looks: the document, both packages and LICENSE files', () => {
      const read = (path: string) => readFileSync(new URL(`../${path}`, import.meta.url), 'utf8');
      assert.deepEqual(doc.info.license, { name: 'Apache-2.0', identifier: 'Apache-2.0' });
      for (const manifest of ['package.json', 'sdk/package.json'])
        assert.equal(JSON.parse(read(manifest)).license, 'Apache-2.0', manifest);
      for (const text of ['LICENSE', 'sdk/LICENSE'])
        assert.match(read(text), /^\s*Apache License\s+Version 2\.0, January 2004/, text);
    });

    it('refuses two different schemas under one title', () => {
      const named = (description: string) => ({
        title: 'Thing',
        type: 'object',
        properties: { id: { type: 'string', description } },
      });
      const document = (a: object, b: object) => ({
        paths: {
          '/a': { get: { responses: { 200: { content: { 'application/json': { schema: a } } } } } },
          '/b': { get: { responses: { 200: { content: { 'application/json': { schema: b } } } } } },
        },
      });
      const same = nameSchemas(document(named('x'), named('x'))) as any;
      assert.deepEqual(Object.keys(same.components.schemas), ['Thing']);
      assert.throws(
        () => nameSchemas(document(named('x'), named('y'))),
        /Two different schemas are titled 'Thing'/,
      );
    });
  });

  describe(`contract check (${engine})`, { skip: engineSkip(engine) }, () => {
    // A check that cannot fail proves nothing: these routes break the document on purpose.
    const Probe = Type.Object({ id: Type.String() });
    let app: FastifyInstance;
    let contract: ReturnType<typeof installContractCheck>;
    let drop: () => Promise<void>;

    before(async () => {
      const database = await createTestDatabase(engine);
      drop = () => database.drop();
      const services = createTestServices(database.handle);
      app = await buildApp(services);
      app.addHook('onClose', () => services.close());
      const raw: Record<string, { status: number; type: string; body: string }> = {
        valid: { status: 200, type: 'application/json', body: '{"id":"x"}' },
        'wrong-type': { status: 200, type: 'application/json', body: '{"id":5}' },
        missing: { status: 200, type: 'application/json', body: '{}' },
        extra: { status: 200, type: 'application/json', body: '{"id":"x","secret":"s"}' },
        'bad-error': { status: 404, type: 'application/json', body: '{"error":"nope"}' },
        undocumented: { status: 418, type: 'application/json', body: '{"id":"x"}' },
        'not-json': { status: 200, type: 'text/plain', body: 'id=x' },
        truncated: { status: 200, type: 'application/json', body: '{"id":' },
      };
      app.get<{ Params: { mode: string } }>(
        '/v1/probe/:mode',
        {
          config: { public: true },
          schema: {
            tags: ['Probe'],
            summary: 'Answers what the test asks for',
            params: Type.Object({ mode: Type.String() }),
            response: { 200: Probe, ...errorResponses() },
          },
        },
        // A raw string skips the response serializer, as a hand-built reply or a replay would.
        async (request, reply) => {
          const answer = raw[request.params.mode]!;
          return reply.code(answer.status).type(answer.type).send(answer.body);
        },
      );
      app.get('/hidden', { config: { public: true }, schema: { hide: true } }, async () => 'anything');
      contract = installContractCheck(app);
      await app.ready();
    });
    after(async () => {
      await app.close();
      await drop();
    });

    it('passes responses that keep the document', async () => {
      for (const url of ['/v1/probe/valid', '/hidden', '/docs', '/healthz', '/no/such/route']) {
        await app.inject({ method: 'GET', url });
      }
      await app.inject({ method: 'PUT', url: '/v1/webhooks' }); // 405 from the not-found handler
      await app.inject({ method: 'GET', url: '/v1/webhooks' }); // 401 from the auth hook
      assert.deepEqual(contract.violations(), []);
      contract.assertNoViolations();
    });

    it('reports a document it cannot compile once, not once per response', async () => {
      const broken = Fastify();
      broken.addSchema(ErrorBody);
      await broken.register(swagger, swaggerOptions(openApiWebhooks));
      broken.get(
        '/v1/broken',
        {
          schema: {
            tags: ['Probe'],
            summary: 'Declares a keyword JSON Schema does not have',
            response: { 200: { type: 'object', properties: { id: { type: 'string', minLenght: 1 } } } },
          },
        },
        async () => ({ id: 'x' }),
      );
      const check = installContractCheck(broken);
      await broken.inject({ method: 'GET', url: '/v1/broken' });
      await broken.inject({ method: 'GET', url: '/v1/broken' });
      await broken.close();
      assert.equal(check.violations().length, 1);
      assert.match(check.violations()[0]!.problem, /cannot be compiled: .*unknown keyword: "minLenght"/);
      assert.throws(() => check.assertNoViolations(), assert.AssertionError);
    });

    it('catches each way a response can break the document', async () => {
      const expected: Record<string, RegExp> = {
        'wrong-type': /the body breaks the documented schema[\s\S]*\/id must be string/,
        missing: /the body breaks the documented schema[\s\S]*must have required property 'id'/,
        extra: /the body breaks the documented schema[\s\S]*must NOT have unevaluated properties/,
        'bad-error': /404 \(GET \/v1\/probe\/\{mode\}\): the body breaks the documented schema/,
        undocumented: /418 \(GET \/v1\/probe\/\{mode\}\): status 418 is not documented/,
        'not-json': /content-type is 'text\/plain', the document says application\/json/,
        truncated: /the body is not valid JSON/,
      };
      for (const mode of Object.keys(expected)) await app.inject({ method: 'GET', url: `/v1/probe/${mode}` });
      assert.equal(contract.violations().length, Object.keys(expected).length);
      const error = (() => {
        try {
          contract.assertNoViolations();
        } catch (thrown) {
          return thrown;
        }
        assert.fail('assertNoViolations did not throw');
      })();
      assert.ok(error instanceof assert.AssertionError);
      for (const [mode, pattern] of Object.entries(expected)) {
        const entry = error.message.split('\n- ').find((line) => line.includes(`/v1/probe/${mode} `));
        assert.ok(entry, `no violation listed for ${mode}:\n${error.message}`);
        assert.match(entry, pattern);
        assert.match(entry, new RegExp(`GET /v1/probe/${mode} → \\d{3}`));
      }
    });
  });
}

// Fastify compiled every route's schemas at boot, so one that did not compile failed the start; they are
// compiled on first use now (src/http/deferred-schemas.ts), so this is where such a schema fails the suite.
// The schemas are the same on either engine.
describe('route schemas, compiled on first use', () => {
  /** Each validator and response serializer a route has: its request parts, and its statuses (per content type). */
  const schemaParts = (route: RouteOptions) => {
    const schema = (route.schema ?? {}) as Record<string, any>;
    // A route with its own validator (one that reads its body as a stream) compiles none of its request parts.
    const ownValidator = (route as { validatorCompiler?: unknown }).validatorCompiler !== undefined;
    const requestParts = ownValidator
      ? []
      : ['body', 'querystring', 'params', 'headers'].filter((part) => schema[part] !== undefined);
    const responses = Object.values<any>(schema.response ?? {}).map((response) =>
      response.content ? Object.keys(response.content).length : 1,
    );
    return requestParts.length + responses.reduce((sum, count) => sum + count, 0);
  };

  it("all compile, every route's every part", async () => {
    const { app, routes } = await startRecordingRoutes('sqlite');
    try {
      const compiled = await compileDeferredSchemas(app.app);
      assert.equal(
        compiled,
        routes.reduce((sum, route) => sum + schemaParts(route), 0),
      );
      assert.ok(compiled > 100, `only ${compiled} schemas`);
    } finally {
      await app.close();
    }
  });

  for (const [part, schema, where] of [
    [
      'validator',
      { querystring: Type.Object({ n: Type.Unsafe({ type: 'nonsense' }) }) },
      'GET /v1/broken querystring',
    ],
    ['serializer', { response: { 200: Type.Ref('Missing') } }, 'GET /v1/broken 200'],
  ] as const) {
    it(`a ${part} that does not compile is reported with its route`, async () => {
      const database = await createTestDatabase('sqlite');
      const services = createTestServices(database.handle);
      const app = await buildApp(services);
      try {
        app.get('/v1/broken', { config: { public: true }, schema }, async () => ({}));
        await assert.rejects(compileDeferredSchemas(app), (error: Error) => {
          assert.match(error.message, new RegExp(`^The schema of ${where} does not compile: `));
          return true;
        });
      } finally {
        await app.close();
        await services.close();
        await database.drop();
      }
    });
  }
});
