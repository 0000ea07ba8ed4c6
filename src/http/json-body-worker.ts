// A request-body thread (json-body.ts): parses a large JSON body with the same `jsonBodyOf` the event loop uses
// for small ones, and decodes the base64 files its route names, each replaced in the body by its token
// (lib/base64.ts DecodedFields); the files' bytes are handed back, not copied.
import { createHash } from 'node:crypto';
import { decodeBase64, decodedFieldToken } from '../lib/base64.ts';
import { ownedForHandover } from '../lib/byte-chunks.ts';
import { lowerThreadPriority, serveThreadRequests } from '../lib/thread-pool.ts';
import { type JsonBodyFault, jsonBodyOf } from './json-text.ts';

export interface JsonBodyRequest {
  /** The body, in the pieces it was handed over in. */
  chunks: Uint8Array[];
  /** The route's `base64Fields`. */
  base64Fields: readonly string[];
}

export type JsonBodyAnswer =
  | JsonBodyFault
  | {
      /** The body, the string of the `i`th file decoded replaced by `tokens[i]` (`decodedFieldToken`). */
      value: unknown;
      tokens: string[];
      /** Each file's bytes; null when it was not base64. */
      decoded: Array<Uint8Array | null>;
    };

/** One step of a `base64Fields` path: a property, or each item of an array. */
type Step = { property: string } | { eachItem: true };

/** `[].attachments[].content` → each item, `attachments`, each item, `content`. */
function stepsOf(path: string): Step[] {
  const steps: Step[] = [];
  for (const part of path.split('.')) {
    const name = part.endsWith('[]') ? part.slice(0, -2) : part;
    if (name !== '') steps.push({ property: name });
    if (part.endsWith('[]')) steps.push({ eachItem: true });
  }
  return steps;
}

/** A string a file is decoded from: an empty one is left as it is, for validation to refuse as it would. */
const isEncodedFile = (value: unknown): value is string => typeof value === 'string' && value !== '';

/**
 * Replaces each string at `steps` in `value` by what `replace` makes of it; every other shape is left as it is,
 * for validation to answer as it answers the same body small.
 */
function replaceStrings(value: unknown, steps: readonly Step[], replace: (text: string) => string): void {
  const [step, ...rest] = steps;
  if (!step || typeof value !== 'object' || value === null) return;
  if ('eachItem' in step) {
    if (!Array.isArray(value)) return;
    for (let index = 0; index < value.length; index++) {
      if (rest.length === 0 && isEncodedFile(value[index])) value[index] = replace(value[index]);
      else replaceStrings(value[index], rest, replace);
    }
    return;
  }
  if (Array.isArray(value) || !Object.hasOwn(value, step.property)) return;
  const holder = value as Record<string, unknown>;
  const found = holder[step.property];
  if (rest.length === 0 && isEncodedFile(found)) holder[step.property] = replace(found);
  else replaceStrings(found, rest, replace);
}

lowerThreadPriority();

serveThreadRequests<JsonBodyRequest, JsonBodyAnswer>(
  ({ chunks, base64Fields }) => {
    const parsed = jsonBodyOf(Buffer.concat(chunks));
    if ('fault' in parsed) return parsed;
    const tokens: string[] = [];
    const decoded: Array<Uint8Array | null> = [];
    for (const path of base64Fields) {
      replaceStrings(parsed.value, stepsOf(path), (text) => {
        const bytes = decodeBase64(text);
        decoded.push(bytes ? ownedForHandover(bytes) : null);
        tokens.push(decodedFieldToken(tokens.length, createHash('sha256').update(text).digest('hex')));
        return tokens.at(-1)!;
      });
    }
    return { value: parsed.value, tokens, decoded };
  },
  (answer) =>
    'decoded' in answer
      ? answer.decoded.flatMap((bytes) => (bytes ? [bytes.buffer as ArrayBuffer] : []))
      : [],
);
