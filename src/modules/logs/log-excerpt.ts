// What an API log keeps of a request's or an answer's body: an excerpt, valid JSON of at most a few KiB,
// with the values of secret fields replaced wherever they appear. Made when a batch of logs is written, after
// the answers (log-recorder.ts), so its cost is never a request's: but it is the process's CPU all the same,
// so a request body is excerpted from the value the server parsed anyway (excerptOf) and an answer from its
// text, a scan that stops at the bound (excerptOfAnswer), never parsed whole.

/**
 * Field names whose values are secrets wherever they appear: a webhook's `secret` and Resend's
 * `signing_secret` (create, rotate), a new key's `token`, a download link (it works without a key for an hour),
 * and what a send's custom headers or any other body could carry under these names.
 */
export const SECRET_FIELD_NAMES = [
  'secret',
  'signing_secret',
  'token',
  'password',
  'api_key',
  'authorization',
  'download_url',
];
const SECRET_FIELD = new RegExp(`^(${SECRET_FIELD_NAMES.join('|')})$`, 'i');
/** Their lengths: most fields' names are told apart by their length alone, before the pattern is tried. */
const SECRET_LENGTHS = new Set(SECRET_FIELD_NAMES.map((name) => name.length));
export const REDACTED = '[redacted]';

/** True for a field whose value is a secret, in any case (`Authorization`, `Token`). */
export const isSecretField = (name: string): boolean =>
  SECRET_LENGTHS.has(name.length) && SECRET_FIELD.test(name);

/** A string longer than this is cut, so one long field (an html body) leaves room for the others. */
const MAX_STRING = 512;
/** Nesting kept; deeper values become a marker. */
const MAX_DEPTH = 8;
/**
 * Bodies this large are excerpted as soon as they are logged rather than held until their batch
 * (log-recorder.ts): the batch holds 2 KiB, not megabytes.
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
    out[key] = isSecretField(key) && field !== null ? REDACTED : cut(field, budget, depth + 1);
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

// An answer is excerpted from its text, as it was sent, without parsing it whole: one pass from its start that
// checks each token and copies the text as it is, and stops where the bound falls, so a list of a hundred
// items costs what its first 2 KiB cost (parsing the whole answer, walking it and writing it again doubled the
// cost of a read: bench/README.md, "API logs"). A string is cut between two characters, never inside an escape;
// a secret field's value is stepped over to its end and replaced, never copied, wherever the bound falls, so
// no part of it is kept even when the cut falls inside it.

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;

/** Room kept, while cutting, for the marker of what is left out and its comma: `,"…":"…(1234567890 more chars)"`. */
const MARKER_BYTES = 40;
/** While cutting, an item is begun only with this much room: `"[redacted]"`, or a cut string's start and marker. */
const MIN_ITEM_BYTES = 32;
/** A cut string's marker at most: `…(1234567890 more chars)` (the ellipsis is 3 bytes). */
const STRING_MARKER_BYTES = 26;
const NESTED = JSON.stringify(omitted('nested deeper'));
const NESTED_BYTES = NESTED.length + 2;
const REDACTED_JSON = JSON.stringify(REDACTED);

/** Thrown (one object, no stack to capture) where the text is not JSON. */
const NOT_JSON = new Error('not JSON');

/** `\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`. */
const SIMPLE_ESCAPES = [QUOTE, BACKSLASH, 0x2f, 0x62, 0x66, 0x6e, 0x72, 0x74];

/** The width of the escape at `j` (a backslash): 6 for `\uXXXX`, else 2. */
function escapeWidth(text: string, j: number): number {
  const e = text.charCodeAt(j + 1);
  if (e === 0x75) {
    for (let k = j + 2; k < j + 6; k += 1) {
      const h = text.charCodeAt(k) | 0x20;
      if (!((h >= 0x30 && h <= 0x39) || (h >= 0x61 && h <= 0x66))) throw NOT_JSON;
    }
    return 6;
  }
  if (SIMPLE_ESCAPES.includes(e)) return 2;
  throw NOT_JSON;
}

// The string being read (stringRun): where, its characters (escapes count one) and UTF-8 bytes so far (its
// quotes included; a surrogate pair counted as 6, over rather than under), and whether it has escapes.
let sj = 0;
let sChars = 0;
let sBytes = 0;
let sEscaped = false;

/**
 * Reads the string from `sj` to its closing quote (true; `sj` at the quote), or until its next character would
 * pass `maxChars` or `maxBytes` (false; `sj` at that character). Throws where it is not a JSON string.
 */
function stringRun(text: string, maxChars: number, maxBytes: number): boolean {
  const n = text.length;
  let j = sj;
  let chars = sChars;
  let bytes = sBytes;
  for (;;) {
    // Printable ASCII, the most of any answer: a character a byte, nothing to check.
    let limit = j + Math.min(maxChars - chars, maxBytes - bytes);
    if (limit > n) limit = n;
    const run = j;
    while (j < limit) {
      const c = text.charCodeAt(j);
      if (c === QUOTE || c === BACKSLASH || c < 0x20 || c > 0x7e) break;
      j += 1;
    }
    chars += j - run;
    bytes += j - run;
    const c = text.charCodeAt(j);
    if (c === QUOTE) {
      sj = j;
      sChars = chars;
      sBytes = bytes;
      return true;
    }
    // The text ended inside the string (NaN), or a control character.
    if (!(c >= 0x20)) throw NOT_JSON;
    let width = 1;
    let size = 1;
    if (c === BACKSLASH) {
      size = width = escapeWidth(text, j);
      sEscaped = true;
    } else if (c >= 0x800) size = 3;
    else if (c >= 0x80) size = 2;
    if (chars + 1 > maxChars || bytes + size > maxBytes) {
      sj = j;
      sChars = chars;
      sBytes = bytes;
      return false;
    }
    chars += 1;
    bytes += size;
    j += width;
  }
}

/** Past the closing quote of the string that `from` is inside of (at a character, not inside an escape). */
function stringEnd(text: string, from: number): number {
  for (let j = from; ;) {
    const quote = text.indexOf('"', j);
    if (quote < 0) throw NOT_JSON;
    let b = quote - 1;
    while (text.charCodeAt(b) === BACKSLASH) b -= 1;
    if ((quote - 1 - b) % 2 === 0) return quote + 1;
    j = quote + 1;
  }
}

const isSpace = (c: number) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

/** Past the JSON whitespace at `i`. */
function spaceEnd(text: string, i: number): number {
  while (isSpace(text.charCodeAt(i))) i += 1;
  return i;
}

/** Past the value at `i`, unread but for where it ends: a secret's, a container nested too deep. */
function skipValue(text: string, i: number): number {
  const start = i;
  let depth = 0;
  for (;;) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      i = stringEnd(text, i + 1);
      if (depth === 0) return i;
      continue;
    }
    if (c === OPEN_OBJECT || c === OPEN_ARRAY) depth += 1;
    else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      if (depth === 0) break;
      depth -= 1;
      if (depth === 0) return i + 1;
    } else if (c !== c) {
      if (depth > 0) throw NOT_JSON;
      break;
    } else if (depth === 0 && (c === COMMA || isSpace(c))) break;
    i += 1;
  }
  if (i === start) throw NOT_JSON;
  return i;
}

const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

/** Past the number, `true`, `false` or `null` at `i`. */
function scalarEnd(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c === 0x74 && text.startsWith('true', i)) return i + 4;
  if (c === 0x66 && text.startsWith('false', i)) return i + 5;
  if (c === 0x6e && text.startsWith('null', i)) return i + 4;
  NUMBER.lastIndex = i;
  if (NUMBER.test(text)) return NUMBER.lastIndex;
  throw NOT_JSON;
}

function isSecretKey(text: string, start: number, end: number, escaped: boolean): boolean {
  if (escaped) return isSecretField(JSON.parse(text.slice(start, end)) as string);
  return SECRET_LENGTHS.has(end - start - 2) && SECRET_FIELD.test(text.slice(start + 1, end - 1));
}

const VALUE = 0;
const ITEM = 1;
const MEMBER = 2;
const AFTER = 3;
/** A value stepped over and replaced: a secret's, or a container nested too deep. */
const REPLACE = 4;

/**
 * The answer's excerpt, or undefined when `cutting` is off and it does not fit whole. The output is the text
 * from `from` on, copied in runs, with what replaces a secret's value or a cut string's rest in between.
 */
function scan(text: string, max: number, cutting: boolean): string | undefined {
  const n = text.length;
  const reserve = cutting ? MARKER_BYTES : 0;
  const minItem = cutting ? MIN_ITEM_BYTES : 0;
  const cap = cutting ? MAX_STRING : n + 1;
  /** The open containers' brackets, how many items each has kept, and where each began as an item. */
  const open: number[] = [];
  const items: number[] = [];
  const openedAt: number[] = [];
  let i = spaceEnd(text, 0);
  let out = '';
  let from = i;
  /** Bytes of the output so far, copied or not. */
  let bytes = 0;
  // Where the item being read begins (its comma, or its first character): an item that does not fit is left
  // out from there.
  let itemAt = i;
  /** Where the output ends when it is cut, and where the rest of the answer (left out) begins. */
  let cutAt = -1;
  let restAt = -1;
  let state = VALUE;
  /** What stands for the value stepped over (REPLACE). */
  let replacement = '';
  scanning: for (;;) {
    const room = max - bytes - open.length - reserve;
    switch (state) {
      case ITEM:
        if (room < minItem) {
          cutAt = restAt = itemAt;
          break scanning;
        }
        state = VALUE;
        continue;
      case MEMBER: {
        if (text.charCodeAt(i) !== QUOTE) throw NOT_JSON;
        const keyAt = i;
        sj = i + 1;
        sChars = 0;
        sBytes = 2;
        sEscaped = false;
        stringRun(text, n + 1, n * 3 + 2);
        const keyEnd = sj + 1;
        const secret = isSecretKey(text, keyAt, keyEnd, sEscaped);
        i = spaceEnd(text, keyEnd);
        if (text.charCodeAt(i) !== COLON) throw NOT_JSON;
        i = spaceEnd(text, i + 1);
        bytes += sBytes + (i - keyEnd);
        const left = max - bytes - open.length - reserve;
        if (left < minItem) {
          cutAt = restAt = itemAt;
          break scanning;
        }
        // A secret's value is stepped over, never copied: it is read only to find where it ends.
        replacement = REDACTED_JSON;
        state = secret ? REPLACE : VALUE;
        continue;
      }
      case REPLACE: {
        const end = skipValue(text, i);
        const isNull = replacement === REDACTED_JSON && end - i === 4 && text.startsWith('null', i);
        const size = isNull ? 4 : replacement === NESTED ? NESTED_BYTES : replacement.length;
        if (size > room) {
          cutAt = restAt = itemAt;
          break scanning;
        }
        if (!isNull) {
          out += text.slice(from, i) + replacement;
          from = end;
        }
        bytes += size;
        i = end;
        state = AFTER;
        continue;
      }
      case AFTER: {
        const valueEnd = i;
        i = spaceEnd(text, i);
        const depth = open.length;
        if (depth === 0) {
          if (i !== n) throw NOT_JSON;
          return out + text.slice(from, valueEnd);
        }
        bytes += i - valueEnd;
        items[depth - 1]! += 1;
        const c = text.charCodeAt(i);
        const inObject = open[depth - 1] === OPEN_OBJECT;
        if (c === COMMA) {
          itemAt = i;
          const next = spaceEnd(text, i + 1);
          bytes += next - i;
          i = next;
          state = inObject ? MEMBER : ITEM;
        } else if (c === (inObject ? CLOSE_OBJECT : CLOSE_ARRAY)) {
          open.pop();
          items.pop();
          openedAt.pop();
          bytes += 1;
          i += 1;
        } else throw NOT_JSON;
        continue;
      }
    }
    // VALUE: a value at `i`.
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      sj = i + 1;
      sChars = 0;
      sBytes = 2;
      const keep = room - (cutting ? STRING_MARKER_BYTES : 0);
      if (stringRun(text, cap, keep)) {
        bytes += sBytes;
        i = sj + 1;
        state = AFTER;
        continue;
      }
      let cut = sj;
      let keptBytes = sBytes;
      const capped = sChars === cap;
      // Past what a cut string keeps: whole all the same when it ends within the room and the cap.
      if (!capped && stringRun(text, cap, room)) {
        bytes += sBytes;
        i = sj + 1;
        state = AFTER;
        continue;
      }
      if (!cutting) return undefined;
      // Half a surrogate pair is not a character.
      const high = text.charCodeAt(cut - 1);
      if (high >= 0xd800 && high <= 0xdbff && cut - 1 > i) {
        cut -= 1;
        keptBytes -= 3;
      }
      const end = stringEnd(text, sj);
      const marker = `${omitted(`${end - 1 - cut} more chars`)}"`;
      out += text.slice(from, cut) + marker;
      from = end;
      bytes += keptBytes + marker.length + 1;
      i = end;
      if (!capped) {
        // The rest of the answer goes with the rest of this string.
        if (open.length > 0) items[open.length - 1]! += 1;
        cutAt = restAt = end;
        break;
      }
      state = AFTER;
      continue;
    }
    if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (open.length >= MAX_DEPTH) {
        replacement = NESTED;
        state = REPLACE;
        continue;
      }
      if (room < 2) {
        cutAt = restAt = itemAt;
        break;
      }
      open.push(c);
      items.push(0);
      openedAt.push(itemAt);
      const next = spaceEnd(text, i + 1);
      bytes += 1 + next - (i + 1);
      i = next;
      // Empty: closed as after an item (the count of an item that is not there goes with the container).
      if (text.charCodeAt(i) === (c === OPEN_OBJECT ? CLOSE_OBJECT : CLOSE_ARRAY)) state = AFTER;
      else {
        itemAt = i;
        state = c === OPEN_OBJECT ? MEMBER : ITEM;
      }
      continue;
    }
    const end = scalarEnd(text, i);
    if (end - i > room) {
      cutAt = restAt = itemAt;
      break;
    }
    bytes += end - i;
    i = end;
    state = AFTER;
  }
  if (!cutting) return undefined;
  // A container cut before it kept anything is left out whole (but the answer's own), not kept as a marker alone.
  while (open.length > 1 && items[open.length - 1] === 0 && openedAt[open.length - 1]! >= from) {
    cutAt = restAt = openedAt.pop()!;
    open.pop();
    items.pop();
  }
  out += text.slice(from, cutAt);
  // What is left out, said by the innermost container, unless only its closing brackets are.
  const depth = open.length;
  const left = n - restAt;
  if (depth > 0 && left > depth) {
    const marker = JSON.stringify(omitted(`${left} more chars`));
    out += (items[depth - 1]! > 0 ? ',' : '') + (open[depth - 1] === OPEN_OBJECT ? `"…":${marker}` : marker);
  }
  for (let k = depth - 1; k >= 0; k -= 1) out += open[k] === OPEN_OBJECT ? '}' : ']';
  // Not even a number fitted (one of 2,000 digits).
  return out === '' ? JSON.stringify(omitted(`${n} chars`)) : out;
}

/**
 * The excerpt of an answer as it was sent: JSON excerpted from its text (above), the values of its secret
 * fields `[redacted]`; an answer of at most `maxBytes` is kept whole (but for its secrets). Other text (a
 * message's raw source) is excerpted as a string; text that starts as JSON but is not is kept as its length
 * only, since a secret could stand anywhere in it.
 */
export function excerptOfAnswer(payload: string | undefined, maxBytes: number): string | null {
  if (payload === undefined || payload === '') return null;
  try {
    if (payload.length <= maxBytes) {
      const whole = scan(payload, maxBytes, false);
      if (whole !== undefined) return whole;
    }
    return scan(payload, maxBytes, true)!;
  } catch (error) {
    if (error !== NOT_JSON) throw error;
    if (/^\s*[[{]/.test(payload)) return JSON.stringify(omitted(`${payload.length} chars, not JSON`));
    return excerptOf(payload, maxBytes);
  }
}
