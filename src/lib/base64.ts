import type { ByteChunks } from './byte-chunks.ts';

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/**
 * Base64 as senders write it, decoded: line breaks (MIME wraps base64 at 76 columns) are ignored, and the `=`
 * padding may be left out, as many encoders do; undefined when it is not base64 (another character, `=`
 * inside, a length no encoding has).
 */
export function decodeBase64(text: string): Buffer | undefined {
  const encoded = /[\r\n]/.test(text) ? text.replace(/[\r\n]/g, '') : text;
  if (!BASE64.test(encoded)) return undefined;
  const padded = encoded.endsWith('=');
  // Padded, the length is a multiple of 4; unpadded, a last group of 1 character cannot encode a byte.
  if (padded ? encoded.length % 4 !== 0 : encoded.length % 4 === 1) return undefined;
  return Buffer.from(encoded, 'base64');
}

/**
 * Base64 strings of a request body that were decoded before the body reached its route (a large body is
 * parsed on a thread, and its files decoded there: http/json-body.ts). Each stands in the body as its token,
 * a string no client can send — it holds U+0000, which no body may hold — and maps here to its bytes, or to
 * undefined when it was not base64 (`decodeBase64`'s rule).
 */
export type DecodedFields = ReadonlyMap<string, ByteChunks | undefined>;

/**
 * The token that stands for the `index`th decoded field of a body (see DecodedFields). It carries a digest of
 * the field's text, so that what is made of the body — an Idempotency-Key's fingerprint of it — still tells
 * two bodies with different files apart.
 */
export const decodedFieldToken = (index: number, digest: string): string =>
  `\u0000decoded:${index}:${digest}`;

/** The bytes of base64 `text`, taking them from `decoded` when the text is one of its tokens. */
export function base64Bytes(text: string, decoded: DecodedFields | undefined): ByteChunks | undefined {
  if (decoded?.has(text)) return decoded.get(text);
  const bytes = decodeBase64(text);
  return bytes && [bytes];
}
