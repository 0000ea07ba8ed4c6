import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { callUnderPath } from '../../http/path-handlers.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { ListQuery, toPageRequest, listOf } from '../../http/list.ts';
import {
  CreateDomainBody,
  DeletedDomain,
  Domain,
  DomainList,
  DomainParams,
  UpdateDomainBody,
} from './domains.schemas.ts';
import type { DkimKeyPair } from './dkim-key.ts';
import type { DomainService } from './domains.service.ts';

const routes = routeOptions(['Domains']);

/**
 * The options of a route on one sending domain (`/v1/domains/:id…`, by id or name): the Domains section, and
 * the domain named in the path. A domain's warm-up and DMARC reports are routes on it too.
 */
export const domainRoutes = routeOptions(['Domains'], { params: DomainParams });

export function registerDomainRoutes(server: FastifyInstance, { domains }: { domains: DomainService }): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();
  // Key pairs are generated before the handler, outside the transaction an Idempotency-Key wraps it in:
  // generating one takes up to a few hundred milliseconds, too long to hold a transaction (and SQLite's one
  // connection) open for.
  const keys = new WeakMap<FastifyRequest, DkimKeyPair>();
  const generateKey = async (request: FastifyRequest) => {
    keys.set(request, await domains.newKey());
  };

  app.post(
    '/v1/domains',
    {
      ...routes.fullAccess({
        operationId: 'createDomain',
        summary: 'Add a sending domain',
        description:
          "Generates its DKIM key (RSA 2048; the private key never leaves the server) and answers the DNS records to publish. Another project's domain of the same name does not stand in the way: the first to verify a name holds it, and while another project holds it (or a domain it is under) the records include this project's `challenge`. The same name twice in one project is a 409 `domain_exists`.",
        body: CreateDomainBody,
        response: { 201: Domain, ...errorResponses(409) },
      }),
      preHandler: generateKey,
    },
    async (request, reply) => {
      const record = await domains.prepareCreate(projectOf(request), request.body, keys.get(request));
      reply.code(201);
      return reply.transact(async (transaction) => domains.toView(await domains.create(transaction, record)));
    },
  );

  app.get(
    '/v1/domains',
    routes.readOnly({
      operationId: 'listDomains',
      summary: 'List sending domains, newest first',
      description: 'The sending domains of this project, newest first, with their records and status.',
      querystring: ListQuery,
      response: { 200: DomainList, ...errorResponses() },
    }),
    async (request) => {
      const page = await domains.list(projectOf(request), toPageRequest(request.query, 'dom'));
      return listOf(page, domains.toView);
    },
  );

  app.get(
    '/v1/domains/:id',
    domainRoutes.readOnly({
      operationId: 'getDomain',
      summary: 'Retrieve a sending domain by id or name',
      description: 'One sending domain, by `dom_…` id or by name.',
      response: { 200: Domain, ...errorResponses() },
    }),
    async (request) => domains.toView(await domains.get(projectOf(request), request.params.id)),
  );

  app.patch(
    '/v1/domains/:id',
    domainRoutes.fullAccess({
      operationId: 'updateDomain',
      summary: 'Update a domain',
      description:
        'Turns receiving on or off. On: its records include the `receiving` MX, and the background check looks at once; its routes take mail once the domain is verified and the MX matches (`receiving_verified`, with a `domain.verified` event). Off: the listener refuses its addresses from the next RCPT on. `dmarc_reports` turns on or off reading the DMARC aggregate reports mailed to `dmarc@<name>` into this project (docs/api/domains.md).',
      body: UpdateDomainBody,
      response: { 200: Domain, ...errorResponses() },
    }),
    async (request) =>
      domains.toView(await domains.update(projectOf(request), request.params.id, request.body)),
  );

  app.delete(
    '/v1/domains/:id',
    domainRoutes.fullAccess({
      operationId: 'deleteDomain',
      summary: 'Remove a sending domain',
      description:
        'Mail from it is no longer signed with its key; if it held the name, the next project to verify the name holds it without a challenge.',
      response: { 200: DeletedDomain, ...errorResponses() },
    }),
    callUnderPath(domains.remove),
  );

  app.post(
    '/v1/domains/:id/verify',
    // The lookups take up to seconds: no transaction is held open for them. Verifying again is harmless.
    domainRoutes.fullAccess(
      {
        operationId: 'verifyDomain',
        summary: "Look up a domain's DNS records now",
        description:
          "Answers the domain with what each lookup found and whether it matches; a change to `verified` or `failed` emits `domain.verified` or `domain.failed`. Verifying a name another project holds (with the `challenge` record published) takes it over: that project's domain becomes `failed` and its `domain.failed` says so.",
        response: { 200: Domain, ...errorResponses() },
      },
      { idempotencyOutsideTransaction: true },
    ),
    async (request) => domains.toView(await domains.verify(projectOf(request), request.params.id)),
  );

  app.post(
    '/v1/domains/:id/dkim/rotate',
    {
      ...domainRoutes.fullAccess({
        operationId: 'rotateDomainKey',
        summary: "Start a rotation of a domain's DKIM key",
        description:
          'Adds a new selector and key as a `pending` record (`rotation: "next"`); the current key (`rotation: "retiring"`) keeps signing until the new record verifies.',
        response: { 200: Domain, ...errorResponses() },
      }),
      preHandler: generateKey,
    },
    async (request, reply) => {
      const plan = await domains.prepareRotate(projectOf(request), request.params.id, keys.get(request));
      return reply.transact(async (transaction) => domains.toView(await domains.rotate(transaction, plan)));
    },
  );
}
