import { createHmac, createSecretKey, type KeyObject } from 'node:crypto';

const WHSEC_PREFIX = 'whsec_';

/**
 * The HMAC key for a webhook secret, as Standard Webhooks prescribes: `whsec_<base64>` is its base64-decoded
 * bytes; any other string is its UTF-8 bytes (a receiver's library then takes base64 of those bytes).
 */
export function signingKey(secret: string): Buffer {
  return secret.startsWith(WHSEC_PREFIX)
    ? Buffer.from(secret.slice(WHSEC_PREFIX.length), 'base64')
    : Buffer.from(secret, 'utf8');
}

/** The secret as a ready key object: made once per secret, it spares each signature the key setup. */
export function signingKeyObject(secret: string): KeyObject {
  return createSecretKey(signingKey(secret));
}

/**
 * The `webhook-signature` header value: `v1,<base64 HMAC-SHA256 of "id.timestamp.body">` for each key,
 * space-separated (several secrets sign at once while one is being rotated).
 */
export function signWithKeys(
  keys: readonly KeyObject[],
  messageId: string,
  timestampSeconds: number,
  body: string,
): string {
  const content = `${messageId}.${timestampSeconds}.${body}`;
  return keys.map((key) => `v1,${createHmac('sha256', key).update(content).digest('base64')}`).join(' ');
}

/** signWithKeys for secrets given as strings. */
export function signWebhook(
  secrets: readonly string[],
  messageId: string,
  timestampSeconds: number,
  body: string,
): string {
  return signWithKeys(secrets.map(signingKeyObject), messageId, timestampSeconds, body);
}
