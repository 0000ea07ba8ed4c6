import type { FastifyInstance } from 'fastify';
import { Liveness, Readiness } from './health.schemas.ts';
import type { HealthService } from './health.service.ts';

const tags = ['Health'];

/** Probes for load balancers and orchestrators: public, like the document itself (no API key to hand out). */
export function registerHealthRoutes(app: FastifyInstance, { health }: { health: HealthService }): void {
  const alive = { status: 'ok' as const };
  app.get(
    '/healthz',
    {
      config: { public: true },
      schema: {
        tags,
        operationId: 'getLiveness',
        summary: 'Is the process alive?',
        description:
          'Answers 200 whenever the process answers HTTP, without touching the database: for a liveness probe, which restarts a process that stopped answering. Needs no API key.',
        response: { 200: Liveness },
      },
    },
    async () => alive,
  );

  app.get(
    '/readyz',
    {
      config: { public: true },
      schema: {
        tags,
        operationId: 'getReadiness',
        summary: 'Is the process ready for traffic?',
        description:
          "200 when the database answers within READINESS_TIMEOUT, its applied migrations are exactly this version's and, where this process runs queue workers, each of them has recorded a heartbeat lately; 503 otherwise, with the check that failed. The process answers HTTP only once its start is complete (POSTWIRE_BOOTSTRAP_KEY stored), so a 200 means every request can be served. For a readiness probe or a load balancer's health check. Needs no API key.",
        response: {
          200: { ...Readiness, description: 'Every check passed.' },
          503: { ...Readiness, description: 'A check failed; its `detail` says why.' },
        },
      },
    },
    async (_request, reply) => {
      const readiness = await health.readiness();
      if (readiness.status !== 'ready') reply.code(503);
      return readiness;
    },
  );
}
