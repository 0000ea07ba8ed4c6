import { AssertionError } from 'node:assert';
import { createHash } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import standaloneCode from 'ajv/dist/standalone/index.js';
import addFormats from 'ajv-formats';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

/**
 * The OpenAPI document is a promise to clients; this makes every test keep it. Each response an app sends
 * (through a port or `inject`) is checked against the document's schema for its operation and status,
 * so a handler, hook or error path that drifts from what the document says fails the suite that saw it.
 */
export interface ContractCheck {
  /** Every response that broke the document so far. */
  violations(): readonly Violation[];
  /** Throws an AssertionError listing each violation. */
  assertNoViolations(): void;
}

export interface Violation {
  method: string;
  url: string;
  status: number;
  /** The OpenAPI operation it was checked against, or `unknown route`. */
  operation: string;
  problem: string;
  errors?: ErrorObject[];
  body?: string;
}

interface Contract {
  /** By `METHOD /openapi/{path}`. */
  operations: Map<string, Operation>;
  /** The Error component, for answers from no route (404, 405). */
  error: ValidateFunction;
}

interface Operation {
  /** Documented statuses: a validator for a JSON body, or null when the status has no body. */
  responses: Map<string, ValidateFunction | null | typeof BYTES>;
}

const DOC_ID = 'urn:postwire:openapi';
// Top-level OpenAPI fields, and OpenAPI's additions to JSON Schema: known to Ajv so that strict mode
// still refuses every other unknown keyword (a typo in a route schema is a broken document).
const OPENAPI_KEYWORDS = [
  'openapi',
  'info',
  'jsonSchemaDialect',
  'servers',
  'paths',
  'webhooks',
  'components',
  'security',
  'tags',
  'externalDocs',
  'discriminator',
  'xml',
  'example',
];
const MEDIA_TYPE = 'application/json';
const BODY_EXCERPT = 300;

/**
 * Each document compiled in this process, by its text: a test file starts many apps (a suite per engine,
 * apps of their own in single tests), nearly always with the same document, and compiling it took 1–2 CPU-s
 * each time, most of a small test file's CPU (api.test.ts: 5 compiles, 7.5 of its 10.6 CPU-s). An app whose
 * options change its document gets that document compiled, as before.
 */
const compiledDocuments = new Map<string, Contract | Error>();

/**
 * Where a compiled document is kept between test processes, as the validators' code (Ajv's standalone code):
 * each test file is a process of its own, and each compiled the same document again, 1–2 CPU-s of every file
 * that starts an app. Named by a hash of the document, this file's code and Ajv's versions, so a changed
 * document or check is compiled afresh; beside Node's compile caches, thrown away with node_modules.
 */
const CONTRACT_CACHE = fileURLToPath(new URL('../../node_modules/.cache/test-contracts/', import.meta.url));
const requireHere = createRequire(import.meta.url);
const CHECK_VERSION = [
  readFileSync(fileURLToPath(import.meta.url), 'utf8'),
  requireHere('ajv/package.json').version,
  requireHere('ajv-formats/package.json').version,
].join('\n');

function compiledContract(document: OpenApiDocument): Contract | Error {
  const text = JSON.stringify(document);
  let compiled = compiledDocuments.get(text);
  if (compiled === undefined) {
    try {
      compiled = cachedContract(document, text);
    } catch (error) {
      compiled = error instanceof Error ? error : new Error(String(error));
    }
    compiledDocuments.set(text, compiled);
  }
  return compiled;
}

/** The document's contract from the cache, or compiled and then cached. */
function cachedContract(document: OpenApiDocument, text: string): Contract {
  const key = createHash('sha256').update(CHECK_VERSION).update('\0').update(text).digest('hex');
  const file = path.join(CONTRACT_CACHE, `${key.slice(0, 32)}.cjs`);
  if (existsSync(file)) {
    try {
      return contractOf(requireHere(file) as CompiledModule);
    } catch {
      // Pruned by another test file a moment ago (or left unreadable): compiled and written again below.
    }
  }
  const { plan, code } = compileDocument(document);
  // Written under a name of its own and renamed: a test file beside this one may read it meanwhile.
  mkdirSync(CONTRACT_CACHE, { recursive: true });
  pruneContractCache();
  const partial = `${file}.${process.pid}.partial`;
  writeFileSync(partial, `${code}\nexports.plan = ${JSON.stringify(plan)};\n`);
  renameSync(partial, file);
  return contractOf(requireHere(file) as CompiledModule);
}

/**
 * Each compiled document is a few MB, and every change to a route's schema makes another: those written more
 * than a day ago go when a new one is written (one still in use is at worst compiled once more).
 */
const CONTRACT_CACHE_DAYS = 1;

function pruneContractCache(): void {
  const before = Date.now() - CONTRACT_CACHE_DAYS * 86_400_000;
  for (const name of readdirSync(CONTRACT_CACHE)) {
    const file = path.join(CONTRACT_CACHE, name);
    // Another test file may have pruned it a moment ago.
    const stat = statSync(file, { throwIfNoEntry: false });
    if (stat && stat.mtimeMs < before) rmSync(file, { force: true });
  }
}

/**
 * What a compiled document's module exports: each validator by its name, and the plan that says which
 * operation and status each checks (null: no body; `bytes`: a body that is not JSON).
 */
interface Plan {
  operations: Array<[operation: string, responses: Array<[status: string, check: string | null]>]>;
  error: string;
}
type CompiledModule = Record<string, ValidateFunction> & { plan: Plan };

function contractOf(compiled: CompiledModule): Contract {
  const validator = (name: string) => {
    const validate = compiled[name];
    if (typeof validate !== 'function') throw new Error(`the compiled document has no validator ${name}`);
    return validate;
  };
  const operations = new Map<string, Operation>();
  for (const [operation, responses] of compiled.plan.operations) {
    operations.set(operation, {
      responses: new Map(
        responses.map(([status, check]) => [
          status,
          check === null ? null : check === BYTES ? BYTES : validator(check),
        ]),
      ),
    });
  }
  return { operations, error: validator(compiled.plan.error) };
}

export function installContractCheck(app: FastifyInstance): ContractCheck {
  const found: Violation[] = [];
  let compiled: Contract | Error | undefined;

  app.addHook('onSend', async (request, reply, payload) => {
    // Compiled on the first response, when every route is registered and the document is final.
    if (compiled === undefined) {
      compiled = compiledContract(app.swagger() as unknown as OpenApiDocument);
      if (compiled instanceof Error) {
        // Reported once per app: a document that cannot be compiled is one defect, not one per response.
        found.push({
          ...where(request, reply),
          operation: '-',
          problem: `the OpenAPI document cannot be compiled: ${compiled.message}`,
        });
      }
    }
    if (compiled instanceof Error) return payload;
    const contract = compiled;
    const checked = (body: unknown) => {
      try {
        const violation = check(contract, request, reply, body);
        if (violation) found.push(violation);
      } catch (error) {
        found.push({
          ...where(request, reply),
          operation: '?',
          problem: `the check failed: ${String(error)}`,
        });
      }
    };
    // A JSON answer streamed (a captured message's /raw): checked once it has all been sent, as it passes.
    if (payload instanceof Readable && String(reply.getHeader('content-type') ?? '').startsWith(MEDIA_TYPE)) {
      const chunks: Buffer[] = [];
      const passing = new Transform({
        transform(chunk: Buffer | string, _encoding, callback) {
          chunks.push(Buffer.from(chunk));
          callback(null, chunk);
        },
        flush(callback) {
          checked(Buffer.concat(chunks));
          callback();
        },
      });
      return payload.pipe(passing);
    }
    checked(payload);
    return payload;
  });

  return {
    violations: () => found,
    assertNoViolations() {
      if (found.length === 0) return;
      throw new AssertionError({
        message: `${found.length} response(s) broke the OpenAPI document:\n${found.map(format).join('\n')}`,
      });
    },
  };
}

function check(
  contract: Contract,
  request: FastifyRequest,
  reply: FastifyReply,
  payload: unknown,
): Violation | undefined {
  const status = reply.statusCode;
  const routeUrl = request.is404 ? undefined : request.routeOptions.url;
  // A HEAD route is Fastify's automatic twin of the GET route; the document describes the GET.
  const method = request.method === 'HEAD' ? 'GET' : request.method;

  let operation: string;
  let validate: ValidateFunction | null;
  if (routeUrl === undefined) {
    // 404 and 405 from the not-found handler: no operation, but still the API's error shape.
    operation = 'unknown route';
    validate = contract.error;
  } else {
    const path = openApiPath(routeUrl);
    operation = `${method} ${path}`;
    const documented = contract.operations.get(operation);
    if (!documented) {
      // Hidden routes (health, the document itself, the docs page and its assets) promise nothing.
      if (request.routeOptions.schema?.hide) return undefined;
      return { ...where(request, reply), operation, problem: 'the route is not in the OpenAPI document' };
    }
    const entry = lookup(documented.responses, status);
    if (entry === undefined) {
      return { ...where(request, reply), operation, problem: `status ${status} is not documented` };
    }
    // Bytes as documented (message/rfc822, an attachment): no JSON to check.
    if (entry === BYTES) return undefined;
    validate = entry;
  }

  const text = bodyText(payload);
  if (validate === null) {
    if (text !== undefined && text !== '') {
      return { ...where(request, reply), operation, problem: 'a body where the document says none' };
    }
    return undefined;
  }
  if (request.method === 'HEAD') return undefined;
  const contentType = String(reply.getHeader('content-type') ?? '');
  if (!contentType.startsWith(MEDIA_TYPE)) {
    return {
      ...where(request, reply),
      operation,
      problem: `content-type is '${contentType}', the document says ${MEDIA_TYPE}`,
      body: excerpt(text),
    };
  }
  if (text === undefined) {
    return { ...where(request, reply), operation, problem: 'the body is a stream, not JSON' };
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return {
      ...where(request, reply),
      operation,
      problem: 'the body is not valid JSON',
      body: excerpt(text),
    };
  }
  if (validate(body)) return undefined;
  return {
    ...where(request, reply),
    operation,
    problem: 'the body breaks the documented schema',
    errors: [...(validate.errors ?? [])],
    body: excerpt(text),
  };
}

interface OpenApiDocument {
  paths?: Record<string, Record<string, { responses?: Record<string, OpenApiResponse> }>>;
  components?: { schemas?: Record<string, unknown> };
  [key: string]: unknown;
}

interface OpenApiResponse {
  content?: Record<string, { schema?: unknown }>;
}

/** A response documented as bytes (`format: binary`), not JSON. */
const BYTES = 'bytes' as const;

const HTTP_METHODS = new Set(['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace']);

/** The document's validators as standalone code, and which operation and status each checks. */
function compileDocument(document: OpenApiDocument): { plan: Plan; code: string } {
  // A copy: closing objects below must not change the document the app serves.
  const doc = structuredClone(document) as OpenApiDocument;
  closeObjects(doc);
  const ajv = new Ajv2020({
    allErrors: true,
    strict: true,
    strictTypes: false,
    strictRequired: false,
    code: { source: true },
  });
  addFormats.default(ajv);
  ajv.addVocabulary(OPENAPI_KEYWORDS);
  ajv.addSchema({ ...doc, $id: DOC_ID });

  const pointer = (...parts: string[]) =>
    `${DOC_ID}#/${parts.map((part) => encodeURIComponent(part.replaceAll('~', '~0').replaceAll('/', '~1'))).join('/')}`;
  // Each checked schema under a name of its own, the name its validator is exported by.
  const names: Record<string, string> = {};
  const validatorOf = (...parts: string[]) => {
    const name = `v${Object.keys(names).length}`;
    ajv.addSchema({ $ref: pointer(...parts) }, name);
    names[name] = name;
    return name;
  };

  const operations: Plan['operations'] = [];
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    for (const [method, operation] of Object.entries(item)) {
      if (!HTTP_METHODS.has(method)) continue;
      const responses: Array<[string, string | null]> = [];
      for (const [status, response] of Object.entries(operation.responses ?? {})) {
        const media = response.content?.[MEDIA_TYPE];
        // Bytes (a message, an attachment) are documented as such: no JSON body to check.
        const binary = Object.values(response.content ?? {}).every(
          (content) => (content as { schema?: { format?: string } }).schema?.format === 'binary',
        );
        if (response.content && !media && !binary) {
          throw new Error(`${method.toUpperCase()} ${path} ${status} is documented without ${MEDIA_TYPE}`);
        }
        if (response.content && !media) {
          responses.push([status, BYTES]);
          continue;
        }
        responses.push([
          status,
          media?.schema === undefined
            ? null
            : validatorOf('paths', path, method, 'responses', status, 'content', MEDIA_TYPE, 'schema'),
        ]);
      }
      operations.push([`${method.toUpperCase()} ${path}`, responses]);
    }
  }
  if (!doc.components?.schemas?.Error) throw new Error('the document has no Error component');
  const error = validatorOf('components', 'schemas', 'Error');
  // Every schema is compiled now, not when a test first meets it, so a broken one fails the first test.
  return { plan: { operations, error }, code: standaloneCode.default(ajv, names) };
}

/**
 * Checks bodies POSTed to webhooks against the document's `webhooks` section (the payload of their `type`),
 * as strictly as responses: a field the document does not describe is a violation too. One line per body
 * that breaks it.
 */
export function checkWebhookPayloads(document: unknown, bodies: readonly string[]): string[] {
  const doc = structuredClone(document) as OpenApiDocument;
  closeObjects(doc);
  const ajv = new Ajv2020({ allErrors: true, strict: true, strictTypes: false, strictRequired: false });
  addFormats.default(ajv);
  ajv.addVocabulary(OPENAPI_KEYWORDS);
  ajv.addSchema({ ...doc, $id: DOC_ID });
  const kinds = (doc.webhooks ?? {}) as Record<string, unknown>;
  const validators = new Map<string, ValidateFunction>();
  const problems: string[] = [];
  for (const body of bodies) {
    const event = JSON.parse(body) as { type?: unknown };
    const type = String(event.type);
    if (!Object.hasOwn(kinds, type)) {
      problems.push(`${type}: not in the document's webhooks section`);
      continue;
    }
    let validate = validators.get(type);
    if (!validate) {
      const path = ['webhooks', type, 'post', 'requestBody', 'content', MEDIA_TYPE, 'schema'];
      validate = ajv.compile({
        $ref: `${DOC_ID}#/${path.map((part) => encodeURIComponent(part.replaceAll('~', '~0').replaceAll('/', '~1'))).join('/')}`,
      });
      validators.set(type, validate);
    }
    if (!validate(event)) {
      const errors = (validate.errors ?? []).map(
        (error) => `${error.instancePath} ${error.message} ${JSON.stringify(error.params)}`,
      );
      problems.push(`${type}: ${errors.join('; ')}\n    body: ${excerpt(body)}`);
    }
  }
  return problems;
}

/** `/v1/webhooks/:webhook_id` → `/v1/webhooks/{webhook_id}`, as @fastify/swagger writes paths. */
function openApiPath(url: string): string {
  return url.replace(/:(\w+)(\([^)]*\))?/g, '{$1}');
}

/** The exact status, then its class (`4XX`), then `default`, as OpenAPI matches responses. */
function lookup<T>(responses: Map<string, T>, status: number): T | undefined {
  for (const key of [String(status), `${String(status)[0]}XX`, 'default']) {
    if (responses.has(key)) return responses.get(key);
  }
  return undefined;
}

/**
 * JSON Schema lets an object carry any property its schema does not name; for a response that would let
 * an undocumented field (a leaked `secret`) through. Objects that list their properties and say nothing
 * about others are closed with `unevaluatedProperties: false`, which (unlike `additionalProperties`) still
 * sees properties named by `anyOf`/`oneOf` branches; members of an `allOf` are left open because each
 * describes only part of the object.
 */
function closeObjects(node: unknown, inAllOf = false): void {
  if (Array.isArray(node)) {
    for (const item of node) closeObjects(item, inAllOf);
    return;
  }
  if (node === null || typeof node !== 'object') return;
  const schema = node as Record<string, unknown>;
  if (
    !inAllOf &&
    schema.properties !== undefined &&
    typeof schema.properties === 'object' &&
    schema.additionalProperties === undefined &&
    schema.unevaluatedProperties === undefined &&
    schema.patternProperties === undefined
  ) {
    schema.unevaluatedProperties = false;
  }
  for (const [key, value] of Object.entries(schema)) {
    // Values, not schemas: closing them would change what they compare equal to.
    if (VALUE_KEYWORDS.has(key)) continue;
    // `properties` maps names to schemas: a property called `allOf` or `properties` is not a keyword.
    if (key === 'properties' && value && typeof value === 'object') {
      for (const child of Object.values(value)) closeObjects(child);
    } else {
      closeObjects(value, key === 'allOf');
    }
  }
}

const VALUE_KEYWORDS = new Set(['const', 'enum', 'default', 'example', 'examples']);

function bodyText(payload: unknown): string | undefined {
  if (payload === null || payload === undefined) return '';
  if (typeof payload === 'string') return payload;
  if (Buffer.isBuffer(payload)) return payload.toString('utf8');
  return undefined;
}

function where(request: FastifyRequest, reply: FastifyReply) {
  return { method: request.method, url: request.url, status: reply.statusCode };
}

function excerpt(text: string | undefined): string | undefined {
  if (text === undefined) return undefined;
  return text.length > BODY_EXCERPT ? `${text.slice(0, BODY_EXCERPT)}…` : text;
}

function format(violation: Violation): string {
  const lines = [
    `- ${violation.method} ${violation.url} → ${violation.status} (${violation.operation}): ${violation.problem}`,
  ];
  for (const error of violation.errors ?? []) {
    lines.push(
      `    ${error.instancePath || '(body)'} ${error.message ?? ''} ${JSON.stringify(error.params)}`,
    );
  }
  if (violation.body !== undefined) lines.push(`    body: ${violation.body}`);
  return lines.join('\n');
}
