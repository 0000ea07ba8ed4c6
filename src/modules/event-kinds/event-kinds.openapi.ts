import { EVENT_KIND_NAMES } from './event-kinds.ts';
import { eventPayloadSchema } from './event-payloads.ts';

// The headers of every webhook delivery (Standard Webhooks, https://www.standardwebhooks.com/).
const SIGNATURE_HEADERS = [
  {
    name: 'webhook-id',
    description: 'The event id (`evt_…`): the same on every retry, so a receiver can drop duplicates.',
    schema: { type: 'string' },
  },
  {
    name: 'webhook-timestamp',
    description: 'Seconds since the Unix epoch when this attempt was signed; refuse ones far from now.',
    schema: { type: 'string', pattern: '^[0-9]+$' },
  },
  {
    name: 'webhook-signature',
    description:
      'Space-separated `v1,<base64>` signatures: HMAC-SHA256 with the webhook secret over `<webhook-id>.<webhook-timestamp>.<body>`. Two while a replaced secret is still in its rotation window.',
    schema: { type: 'string' },
  },
].map((header) => ({ ...header, in: 'header', required: true }));

/**
 * The OpenAPI 3.1 `webhooks` section: one POST per event kind in the catalogue, with its body and the
 * signature headers, so generated clients type what a receiver gets.
 */
export function openApiWebhooks(): Record<string, unknown> {
  return Object.fromEntries(
    EVENT_KIND_NAMES.map((kind) => {
      const payload = eventPayloadSchema(kind);
      return [
        kind,
        {
          post: {
            operationId: `on${(payload.title as string).replace(/Event$/, '')}`,
            summary: kind,
            description: `${String(payload.description)} Sent to every enabled webhook subscribed to \`${kind}\`, signed with its secret (Standard Webhooks).`,
            tags: ['Webhooks'],
            security: [],
            parameters: SIGNATURE_HEADERS,
            requestBody: { required: true, content: { 'application/json': { schema: payload } } },
            responses: {
              '2XX': { description: 'Received. Any 2xx within the timeout (15 s) is a success.' },
              '410': { description: 'Gone: the webhook is disabled and nothing more is sent to it.' },
              '4XX': { description: 'Failed: retried on the schedule (429 and 503 may say `retry-after`).' },
              '5XX': { description: 'Failed: retried on the schedule.' },
            },
          },
        },
      ];
    }),
  );
}
