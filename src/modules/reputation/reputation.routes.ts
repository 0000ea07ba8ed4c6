import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { Reputation, ReputationSettingsBody, Resumed, ResumeBody } from './reputation.schemas.ts';
import type { ReputationService } from './reputation.service.ts';

const routes = routeOptions(['Reputation']);

export function registerReputationRoutes(
  server: FastifyInstance,
  { reputation }: { reputation: ReputationService },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/reputation',
    routes.readOnly({
      operationId: 'getReputation',
      summary: "The project's bounce and complaint rates, and whether sending is paused",
      description:
        'The reputation breaker: per project and per From domain, hard bounces and complaints over the window (REPUTATION_WINDOW_DAYS), counted now, and the state the last check left (`warning` past a warning threshold, `paused` past a limit until resumed).',
      response: { 200: Reputation, ...errorResponses() },
    }),
    async (request) => reputation.view(projectOf(request)),
  );

  app.post(
    '/v1/reputation/resume',
    routes.fullAccess({
      operationId: 'resumeSending',
      summary: 'Resume a paused project or domain',
      description:
        'Resumes every paused scope of the project, or only `domain`; each gets a `project.sending_resumed` event, and its rates count again from now. 409 `not_paused` when nothing is paused.',
      body: ResumeBody,
      response: { 200: Resumed, ...errorResponses(409) },
    }),
    async (request, reply) => {
      const plan = await reputation.prepareResume(projectOf(request), request.body?.domain);
      return reply.transact(async (transaction) => ({
        object: 'reputation_resume' as const,
        resumed: await reputation.resume(transaction, plan, 'api'),
      }));
    },
  );

  app.patch(
    '/v1/reputation',
    routes.fullAccess({
      operationId: 'updateReputationSettings',
      summary: 'Choose what a pause holds',
      description:
        '`pause_all_sending`: true, a pause refuses every send from the paused scope; false, only broadcasts; null, what REPUTATION_PAUSE_ALL_SENDING says.',
      body: ReputationSettingsBody,
      response: { 200: Reputation, ...errorResponses() },
    }),
    async (request, reply) => {
      const projectId = projectOf(request);
      await reply.transact((transaction) =>
        reputation.setPauseAllSending(transaction, projectId, request.body.pause_all_sending),
      );
      return reputation.view(projectId);
    },
  );
}
