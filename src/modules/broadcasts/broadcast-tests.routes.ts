import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { routeOptions } from '../../http/route-options.ts';
import type { EmailService } from '../emails/emails.service.ts';
import { storeSend } from '../emails/emails.routes.ts';
import {
  BroadcastPreview,
  BroadcastTest,
  PreviewBroadcastBody,
  TestBroadcastBody,
} from './broadcast-tests.schemas.ts';
import type { BroadcastTests } from './broadcast-tests.ts';
import { BroadcastParams } from './broadcasts.schemas.ts';

// A broadcast's preview as a contact (a read: read_only keys may) and its test to one address (a send:
// sending_access or full_access, a domain-limited key only from its domain, like sending the broadcast).
export function registerBroadcastTestRoutes(
  server: FastifyInstance,
  { broadcastTests, emails }: { broadcastTests: BroadcastTests; emails: EmailService },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();
  const routes = routeOptions(['Broadcasts']);

  app.post(
    '/v1/broadcasts/:id/preview',
    routes.readOnly({
      operationId: 'previewBroadcast',
      summary: 'Preview a broadcast as one of its contacts',
      description:
        'The subject, html and text the contact’s copy would carry, personalized as the fan-out makes it (any status; a template’s published version). The per-contact links stay placeholders: `{{ unsubscribe_url }}` and `{{ preferences_url }}` (each copy gets its own when sent). Nothing is stored or sent.',
      params: BroadcastParams,
      body: PreviewBroadcastBody,
      response: { 200: BroadcastPreview, ...errorResponses() },
    }),
    async (request) => broadcastTests.preview(projectOf(request), request.params.id, request.body.contact),
  );

  app.post(
    '/v1/broadcasts/:id/test',
    routes.sendingAccess({
      operationId: 'testBroadcast',
      summary: 'Send a test of a broadcast to one address',
      description:
        'An ordinary email (`GET /v1/emails/{id}`) from the broadcast’s From to `to`, personalized as `contact` (or the contact with that address, or a stand-in), its subject starting `[Test] ` and tagged `broadcast_test`: it is not a copy of the broadcast and never counts in its numbers. Sent under the rules of any send by the key (a domain-limited key only from its domain). Its unsubscribe link is the test address’s own; its preference link stays the `{{ preferences_url }}` placeholder.',
      params: BroadcastParams,
      body: TestBroadcastBody,
      response: { 202: BroadcastTest, ...errorResponses() },
    }),
    async (request, reply) => {
      const { plan, view } = await broadcastTests.prepareTest(
        projectOf(request),
        request.params.id,
        request.body,
        request.caller!,
      );
      reply.code(202);
      return storeSend(reply, emails, plan, view);
    },
  );
}
