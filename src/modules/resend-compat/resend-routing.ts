import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';

// What every /resend route file shares: the routes are left out of the OpenAPI document (it describes /v1),
// an `:id` parameter, and a Resend body turned into Postwire's before /v1's schema checks it.

/** A route's schema option: hidden from the OpenAPI document. */
export const hide = { hide: true } as const;

export const IdParams = Type.Object({ id: Type.String({ minLength: 1 }) });
/** A webhook's event (Postwire's delivery) in Resend's paths. */
export const WebhookEventParams = Type.Object({
  id: Type.String({ minLength: 1 }),
  eventId: Type.String({ minLength: 1 }),
});

/**
 * Replaces a request's body with what `translate` makes of it, before the /v1 schema checks it. The API log
 * shows the body the client sent (`clientBody`, src/modules/logs/logs.hook.ts).
 */
export const translated =
  (translate: (body: unknown) => unknown) =>
  async (request: FastifyRequest): Promise<void> => {
    request.clientBody = request.body;
    request.body = translate(request.body);
  };
