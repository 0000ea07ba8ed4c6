import { isUtf8 } from 'node:buffer';
import { parse as secureJsonParse } from 'secure-json-parse';

// The one rule for a JSON request body's text, run on the event loop for a small body and on a thread for a
// large one (json-body.ts): here, apart, so that the thread loads no more than it needs.

/** The error code of a JSON body whose bytes are not UTF-8 (the error handler answers 400). */
export const BODY_NOT_UTF8 = 'POSTWIRE_ERR_BODY_NOT_UTF8';

/** The error code of a JSON body nested deeper than MAX_JSON_DEPTH (the error handler answers 400). */
export const BODY_TOO_DEEP = 'POSTWIRE_ERR_BODY_TOO_DEEP';

/**
 * How deeply a JSON body may nest arrays and objects. Far beyond any request of this API (template variables
 * are the deepest, and a dozen levels is a lot for them), and far below what recursive code — JSON.stringify
 * for the Idempotency-Key fingerprint, structured cloning into the render threads — survives: a few thousand
 * levels overflow the stack.
 */
export const MAX_JSON_DEPTH = 64;

/** Why a body is not JSON the API takes, as data (it crosses from the thread): `bodyError` makes it an error. */
export type JsonBodyFault =
  { fault: 'empty' | 'invalid' | 'not_utf8' | 'too_deep' } | { fault: 'nul'; path: string };

/**
 * The one rule for a JSON body, on either thread: UTF-8 (decoding would turn other bytes into U+FFFD and store
 * that), parsed as Fastify parses it (secure-json-parse, `__proto__` and `constructor.prototype` refused),
 * nested at most MAX_JSON_DEPTH deep, and no string holding U+0000 (PostgreSQL text cannot store the
 * character, so it would fail the write there and be stored on SQLite; and the tokens of decoded files hold
 * it, so no client can forge one).
 */
export function jsonBodyOf(bytes: Buffer): { value: unknown } | JsonBodyFault {
  if (bytes.length === 0) return { fault: 'empty' };
  if (!isUtf8(bytes)) return { fault: 'not_utf8' };
  const text = bytes.toString('utf8');
  let value: unknown;
  try {
    value = secureJsonParse(text, { protoAction: 'error', constructorAction: 'error' });
  } catch {
    return { fault: 'invalid' };
  }
  if (deeperThan(value, MAX_JSON_DEPTH)) return { fault: 'too_deep' };
  // Only bodies whose text has the escape are searched.
  const path = text.includes('\\u0000') ? nulPath(value, '') : undefined;
  return path === undefined ? { value } : { fault: 'nul', path };
}

/** Whether arrays and objects nest in `value` more than `levels` deep; it looks no deeper than that. */
function deeperThan(value: unknown, levels: number): boolean {
  if (typeof value !== 'object' || value === null) return false;
  if (levels === 0) return true;
  if (Array.isArray(value)) {
    for (const item of value) if (deeperThan(item, levels - 1)) return true;
    return false;
  }
  for (const key in value) {
    if (deeperThan((value as Record<string, unknown>)[key], levels - 1)) return true;
  }
  return false;
}

/** The field path (`a.b[2]`) of the first string holding U+0000, '' for the value itself, else undefined. */
function nulPath(value: unknown, path: string): string | undefined {
  if (typeof value === 'string') return value.includes('\u0000') ? path : undefined;
  if (Array.isArray(value)) {
    for (let index = 0; index < value.length; index++) {
      const found = nulPath(value[index], `${path}[${index}]`);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  if (typeof value === 'object' && value !== null) {
    for (const [key, item] of Object.entries(value)) {
      const found = nulPath(item, path ? `${path}.${key}` : key);
      if (found !== undefined) return found;
    }
  }
  return undefined;
}
