import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { callUnderPathWith } from '../../http/path-handlers.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { domainRoutes } from '../domains/domains.routes.ts';
import { DmarcSummary, DmarcSummaryQuery } from './dmarc.schemas.ts';
import type { DmarcService } from './dmarc.service.ts';

export function registerDmarcRoutes(server: FastifyInstance, { dmarc }: { dmarc: DmarcService }): void {
  server.withTypeProvider<TypeBoxTypeProvider>().get(
    '/v1/domains/:id/dmarc',
    domainRoutes.readOnly({
      operationId: 'getDomainDmarc',
      summary: "Summarize a domain's DMARC aggregate reports",
      description:
        'What receivers reported of mail sent as this domain (DMARC aggregate reports mailed to `dmarc@<BOUNCE_DOMAIN>`, which the compliance check asks the domain to name in `rua=`): messages, DKIM, SPF and DMARC pass and fail, what the receivers did, and who sent (by source address and reporter). A period of reports by when they began, at most 366 days.',
      querystring: DmarcSummaryQuery,
      response: { 200: DmarcSummary, ...errorResponses(422) },
    }),
    callUnderPathWith('query', dmarc.summary),
  );
}
