// What an API log keeps of a request's or an answer's body: an excerpt, valid JSON of at most a few KiB,
// with the values of secret fields replaced wherever they appear. Made when a batch of logs is written, after
// the answers (log-recorder.ts), so its cost is never a request's.

/**
 * Field names whose values are secrets wherever they appear: a webhook's `secret` and Resend's
 * `signing_secret` (create, rotate), a new key's `token`, a download link (it works without a key for an hour),
 * and what a send's custom headers or any other body could carry under these names.
 */
const SECRET_FIELD = /^(secret|signing_secret|token|password|api_key|authorization|download_url)$/i;
export const REDACTED = '[redacted]';

/** A string longer than this is cut, so one long field (an html body) leaves room for the others. */
const MAX_STRING = 512;
/** Nesting kept; deeper values become a marker. */
const MAX_DEPTH = 8;
/**
 * An answer longer than this is not parsed at all: its excerpt says only how long it was. Bodies this large
 * are also excerpted as soon as they are logged rather than held until their batch (log-recorder.ts).
 */
export const LARGE_BODY_CHARS = 256 * 1024;

interface Budget {
  left: number;
}

const omitted = (what: string) => `…(${what})`;

function cut(value: unknown, budget: Budget, depth: number): unknown {
  if (value === null || typeof value === 'boolean' || typeof value === 'number') {
    budget.left -= String(value).length;
    return value;
  }
  if (typeof value === 'string') {
    const keep = Math.max(0, Math.min(MAX_STRING, budget.left));
    const text =
      value.length > keep ? value.slice(0, keep) + omitted(`${value.length - keep} more chars`) : value;
    budget.left -= text.length + 2;
    return text;
  }
  if (typeof value !== 'object') return null;
  if (depth >= MAX_DEPTH) return omitted('nested deeper');
  if (Array.isArray(value)) {
    const out: unknown[] = [];
    for (let index = 0; index < value.length; index += 1) {
      if (budget.left < 16) {
        out.push(omitted(`${value.length - index} more items`));
        break;
      }
      out.push(cut(value[index], budget, depth + 1));
      budget.left -= 1;
    }
    return out;
  }
  const out: Record<string, unknown> = {};
  const entries = Object.entries(value);
  for (let index = 0; index < entries.length; index += 1) {
    const [key, field] = entries[index]!;
    if (budget.left < 16) {
      out['…'] = omitted(`${entries.length - index} more fields`);
      break;
    }
    budget.left -= key.length + 4;
    out[key] = SECRET_FIELD.test(key) && field !== null ? REDACTED : cut(field, budget, depth + 1);
  }
  return out;
}

/**
 * At most `maxBytes` of JSON (UTF-8) standing for `value`: secret fields redacted, long strings, arrays and
 * objects cut with a marker saying how much is left out. Null when there is no body.
 */
export function excerptOf(value: unknown, maxBytes: number): string | null {
  if (value === undefined || value === null) return null;
  // Escapes and characters over one byte can make the JSON longer than the characters counted: cut again,
  // tighter, until it fits.
  for (let chars = maxBytes; chars >= 64; chars = Math.floor(chars / 2)) {
    const text = JSON.stringify(cut(value, { left: chars }, 0));
    if (Buffer.byteLength(text) <= maxBytes) return text;
  }
  return JSON.stringify(omitted('too large to excerpt'));
}

/** The excerpt of an answer as it was sent: JSON parsed and excerpted, other text excerpted as a string. */
export function excerptOfAnswer(payload: string | undefined, maxBytes: number): string | null {
  if (payload === undefined || payload === '') return null;
  if (payload.length > LARGE_BODY_CHARS) return JSON.stringify(omitted(`${payload.length} chars`));
  let parsed: unknown = payload;
  try {
    parsed = JSON.parse(payload);
  } catch {
    // Not JSON (a message's raw text): kept as a string.
  }
  return excerptOf(parsed, maxBytes);
}
