import { Webhook, WebhookVerificationError as StandardVerificationError } from 'standardwebhooks';
import type { webhooks } from './generated/openapi.ts';

/** Every event a webhook can receive, discriminated by `type`. */
export type WebhookEvent = {
  [Kind in keyof webhooks]: webhooks[Kind]['post']['requestBody']['content']['application/json'];
}[keyof webhooks];

/** One kind's event: `WebhookEventOf<'email.bounced'>`. */
export type WebhookEventOf<Kind extends WebhookEvent['type']> = Extract<WebhookEvent, { type: Kind }>;

/** A delivery whose signature, timestamp or headers do not check out: answer it with a 400. */
export class WebhookVerificationError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'WebhookVerificationError';
  }
}

type HeaderBag = Headers | Record<string, string | string[] | undefined>;

const WHSEC_PREFIX = 'whsec_';

/**
 * Checks a webhook delivery and returns its event. `rawBody` must be the bytes as received (parse the
 * JSON only afterwards: re-serialising changes them); `headers` are the request's (a Fetch `Headers` or
 * Node's `req.headers`); `secret` is the webhook's signing secret. A `whsec_<base64>` secret is its base64
 * bytes (Standard Webhooks), any other string its UTF-8 bytes, as the server signs. Signatures older or
 * newer than five minutes are refused (replays). Throws WebhookVerificationError; a TypeError when
 * `rawBody` is not a string or bytes (a parsed object: a mistake in the calling code, not a bad delivery).
 */
export function verifyWebhook(
  rawBody: string | Uint8Array,
  headers: HeaderBag,
  secret: string,
): WebhookEvent {
  if (typeof rawBody !== 'string' && !(rawBody instanceof Uint8Array)) throw notRawBody(rawBody);
  const body = typeof rawBody === 'string' ? rawBody : new TextDecoder().decode(rawBody);
  let verifier: Webhook;
  try {
    verifier = secret.startsWith(WHSEC_PREFIX)
      ? new Webhook(secret)
      : new Webhook(new TextEncoder().encode(secret), { format: 'raw' });
  } catch (error) {
    throw new WebhookVerificationError('The secret is not a valid webhook secret.', { cause: error });
  }
  try {
    return verifier.verify(body, lowercased(headers)) as WebhookEvent;
  } catch (error) {
    if (error instanceof StandardVerificationError || error instanceof SyntaxError) {
      throw new WebhookVerificationError(error.message, { cause: error });
    }
    throw error;
  }
}

/** The error for a body that is not the raw one: most often JSON a framework already parsed. */
function notRawBody(value: unknown): TypeError {
  const got =
    value === null
      ? 'null'
      : Array.isArray(value)
        ? 'an array'
        : typeof value === 'object'
          ? 'an object (already parsed JSON?)'
          : typeof value;
  return new TypeError(
    `verifyWebhook needs the raw request body exactly as received, as a string or bytes (Buffer, Uint8Array), but got ${got}. ` +
      'The signature covers the exact bytes, and parsed JSON serialised again is not them: read the body raw ' +
      "(express.raw({ type: 'application/json' }), await request.text()) and parse the event verifyWebhook returns.",
  );
}

function lowercased(headers: HeaderBag): Record<string, string> {
  const out: Record<string, string> = {};
  if (headers instanceof Headers) {
    headers.forEach((value, name) => (out[name.toLowerCase()] = value));
    return out;
  }
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) out[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : value;
  }
  return out;
}
