import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { callUnderPath } from '../../http/path-handlers.ts';
import { ListQuery, toPageRequest, listOf } from '../../http/list.ts';
import { CreateDomainBody, UpdateDomainBody } from '../domains/domains.schemas.ts';
import type { DomainService } from '../domains/domains.service.ts';
import { toPostwireDomain, toResendClaim, toResendDomain, toResendDomainListItem } from './resend-domains.ts';
import { hide, IdParams, translated } from './resend-routing.ts';

/** Resend's domains (`resend.domains.*`) over the domains service, in Resend's shapes. */
export function registerResendDomainRoutes(
  scope: FastifyInstance,
  { domains }: { domains: DomainService },
): void {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();

  const domainFields = { resendFields: { receiving: 'capabilities.receiving' } };
  app.post(
    '/domains',
    {
      config: { permission: 'full_access', ...domainFields },
      schema: { ...hide, body: CreateDomainBody },
      preValidation: translated(toPostwireDomain),
    },
    async (request, reply) => {
      const record = await domains.prepareCreate(projectOf(request), request.body);
      return reply.transact(async (transaction) =>
        toResendDomain(domains.toView(await domains.create(transaction, record))),
      );
    },
  );

  app.get(
    '/domains',
    { config: { permission: 'read_only' }, schema: { ...hide, querystring: ListQuery } },
    async (request) => {
      const page = await domains.list(projectOf(request), toPageRequest(request.query, 'dom'));
      return listOf(page, (domain) => toResendDomainListItem(domains.toView(domain)));
    },
  );

  app.get(
    '/domains/:id',
    { config: { permission: 'read_only' }, schema: { ...hide, params: IdParams } },
    async (request) =>
      toResendDomain(domains.toView(await domains.get(projectOf(request), request.params.id))),
  );

  app.patch(
    '/domains/:id',
    {
      config: { permission: 'full_access', ...domainFields },
      schema: { ...hide, params: IdParams, body: UpdateDomainBody },
      preValidation: translated(toPostwireDomain),
    },
    async (request) => {
      const domain = await domains.update(projectOf(request), request.params.id, request.body);
      return { object: 'domain', id: domain.id };
    },
  );

  app.delete(
    '/domains/:id',
    { config: { permission: 'full_access' }, schema: { ...hide, params: IdParams } },
    callUnderPath(domains.remove),
  );

  // Resend's domain claims are Postwire's takeover challenge (docs/api/domains.md): a claim is the project's
  // domain of that name, with its challenge record; verifying the claim verifies the domain.
  app.post(
    '/domains/claim',
    {
      config: { permission: 'full_access' },
      schema: { ...hide, body: CreateDomainBody },
      preValidation: translated(toPostwireDomain),
    },
    async (request, reply) => {
      const record = await domains.prepareCreate(projectOf(request), request.body);
      return toResendClaim(await reply.transact((transaction) => domains.create(transaction, record)));
    },
  );

  app.get(
    '/domains/:id/claim',
    { config: { permission: 'read_only' }, schema: { ...hide, params: IdParams } },
    async (request) => toResendClaim(await domains.get(projectOf(request), request.params.id)),
  );

  app.post(
    '/domains/:id/claim/verify',
    {
      config: { permission: 'full_access', idempotencyOutsideTransaction: true },
      schema: { ...hide, params: IdParams },
    },
    async (request) => toResendClaim(await domains.verify(projectOf(request), request.params.id)),
  );

  app.post(
    '/domains/:id/verify',
    {
      // As /v1: the lookups take seconds, no transaction is held open for them.
      config: { permission: 'full_access', idempotencyOutsideTransaction: true },
      schema: { ...hide, params: IdParams },
    },
    async (request) => {
      const domain = await domains.verify(projectOf(request), request.params.id);
      return { object: 'domain', id: domain.id };
    },
  );
}
