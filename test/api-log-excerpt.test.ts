import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { excerptOf, excerptOfAnswer, REDACTED, SECRET_FIELD_NAMES } from '../src/modules/logs/log-excerpt.ts';
import { seeded32 } from './helpers/random.ts';

// An API log's excerpt of an answer is made from the answer's text by a scan that stops at the bound
// (issue 43), not by parsing the answer whole (the parse-redact reference: excerptOf(JSON.parse(answer))).
// What it must hold, for every answer:
// - it is JSON of at most 2 KiB, and no part of a secret field's value is in it, wherever the bound falls;
// - an answer of at most 2 KiB (secrets replaced) is kept whole: the answer with its secrets `[redacted]`,
//   which is what the reference gives whenever the reference cuts nothing;
// - a longer one is a prefix of it: each value kept is the answer's, or the start of the answer's string with
//   `…(N more chars)`, and a container cut says `…(N more chars)` of the answer are left out.

const MAX = 2048;
/** Only secret values carry this character: an excerpt that holds it (or its escape) kept a secret. */
const MARK = '§';

function assertNoSecret(excerpt: string, what: string) {
  assert.ok(!excerpt.includes(MARK) && !/\\u00a7/i.test(excerpt), `a secret is kept (${what}): ${excerpt}`);
}

function assertExcerpt(text: string): unknown {
  const excerpt = excerptOfAnswer(text, MAX)!;
  assert.ok(Buffer.byteLength(excerpt) <= MAX, `${Buffer.byteLength(excerpt)} bytes: ${excerpt}`);
  assertNoSecret(excerpt, text.slice(0, 200));
  return JSON.parse(excerpt);
}

const isSecretName = (name: string) => SECRET_FIELD_NAMES.includes(name.toLowerCase());

/** The answer as the reference redacts it, nothing cut (nesting past 8 is a marker in both). */
function redacted(value: unknown, depth = 0): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (depth >= 8) return '…(nested deeper)';
  if (Array.isArray(value)) return value.map((item) => redacted(item, depth + 1));
  return Object.fromEntries(
    Object.entries(value).map(([key, field]) => [
      key,
      isSecretName(key) && field !== null ? REDACTED : redacted(field, depth + 1),
    ]),
  );
}

const REST = /^…\(\d+ more chars\)$/;
const CUT_STRING = /^(.*)…\(\d+ more chars\)$/s;

/** True when `kept` is what a cut leaves of `full` (already redacted). */
function isPrefix(kept: unknown, full: unknown): boolean {
  if (typeof kept === 'string') {
    if (kept === full) return true;
    if (kept === '…(nested deeper)') return typeof full === 'object' && full !== null;
    const cut = CUT_STRING.exec(kept);
    return typeof full === 'string' && cut !== null && full.startsWith(cut[1]!);
  }
  if (Array.isArray(kept)) {
    if (!Array.isArray(full)) return false;
    return kept.every(
      (item, index) =>
        (index === kept.length - 1 && typeof item === 'string' && REST.test(item) && index <= full.length) ||
        isPrefix(item, full[index]),
    );
  }
  if (kept !== null && typeof kept === 'object') {
    if (full === null || typeof full !== 'object' || Array.isArray(full)) return false;
    return Object.entries(kept).every(([key, item]) =>
      key === '…'
        ? typeof item === 'string' && REST.test(item)
        : key in full && isPrefix(item, (full as never)[key]),
    );
  }
  return kept === full;
}

// ---- Random answers: seeded, so a failure is the same on every run.

function random(seed: number) {
  const { random: next, below: int, pick } = seeded32(seed);
  return { next, int, pick };
}
type Random = ReturnType<typeof random>;

const PIECES = ['a', 'b', 'z', '0', ' ', '"', '\\', '/', '\n', '\t', '\u0001', 'é', '✓', '😀', '€', 'x'];
const KEYS = [
  'id',
  'url',
  'data',
  'name',
  'html',
  'to',
  'items',
  'a"b',
  'ünï',
  'x\\y',
  'object',
  'has_secret',
];

function text(rng: Random, long: boolean, secret = false): string {
  const length = long ? 400 + rng.int(2600) : rng.int(24);
  let out = secret ? MARK : '';
  while (out.length < length) out += rng.pick(PIECES) + (secret && rng.int(4) === 0 ? MARK : '');
  return out;
}

function secretValue(rng: Random, depth: number): unknown {
  switch (rng.int(6)) {
    case 0:
      return null;
    case 1:
      return [text(rng, false, true), { inner: text(rng, rng.int(5) === 0, true) }];
    case 2:
      return { nested: text(rng, false, true), deeper: [text(rng, false, true)], n: 1 };
    default:
      return depth > 6 ? text(rng, false, true) : text(rng, rng.int(4) === 0, true);
  }
}

function secretName(rng: Random): string {
  const name = rng.pick(SECRET_FIELD_NAMES);
  return [...name].map((c) => (rng.int(3) === 0 ? c.toUpperCase() : c)).join('');
}

function value(rng: Random, depth: number): unknown {
  const kind = depth > 9 ? rng.int(4) : rng.int(depth > 3 ? 6 : 8);
  switch (kind) {
    case 0:
      return text(rng, rng.int(12) === 0);
    case 1:
      return rng.pick([0, -1, 1.5, 123456789, -2.5e-7, 1e21]);
    case 2:
      return rng.pick([true, false, null]);
    case 3:
      return text(rng, false);
    case 4:
    case 5: {
      const items = Array.from({ length: rng.int(depth === 0 ? 40 : 5) }, () => value(rng, depth + 1));
      return items;
    }
    default: {
      const object: Record<string, unknown> = {};
      const fields = rng.int(depth === 0 ? 12 : 6);
      for (let i = 0; i < fields; i += 1) {
        if (rng.int(4) === 0) object[secretName(rng)] = secretValue(rng, depth);
        else object[rng.pick(KEYS) + (rng.int(3) === 0 ? String(i) : '')] = value(rng, depth + 1);
      }
      return object;
    }
  }
}

/** JSON text as a serializer might write it: some characters of strings and keys escaped, some whitespace. */
function serialize(rng: Random, data: unknown, spaced: boolean): string {
  const space = () => (spaced && rng.int(3) === 0 ? rng.pick([' ', '\n', '\t ', '\r\n']) : '');
  const string = (s: string) => {
    let out = '"';
    for (let k = 0; k < s.length; k += 1) {
      const unit = s.charCodeAt(k);
      if (rng.int(10) === 0) out += `\\u${unit.toString(16).padStart(4, '0')}`;
      else if (unit >= 0xd800 && unit <= 0xdbff && k + 1 < s.length) out += s[k]! + s[++k]!;
      else out += JSON.stringify(s[k]).slice(1, -1);
    }
    return `${out}"`;
  };
  const write = (v: unknown): string => {
    if (typeof v === 'string') return string(v);
    if (v === null || typeof v !== 'object') return JSON.stringify(v);
    if (Array.isArray(v))
      return `[${space()}${v.map((item) => write(item)).join(`${space()},${space()}`)}${space()}]`;
    const fields = Object.entries(v).map(
      ([key, item]) => `${string(key)}${space()}:${space()}${write(item)}`,
    );
    return `{${space()}${fields.join(`${space()},${space()}`)}${space()}}`;
  };
  return `${space()}${write(data)}${space()}`;
}

/** A bound the excerpt's scan is sure of: surrogate pairs counted 6 bytes, each secret's value as `"[redacted]"`. */
function fitsWhole(answer: string, data: unknown): boolean {
  const pairs = answer.match(/[\ud800-\udbff][\udc00-\udfff]/g)?.length ?? 0;
  const secrets =
    JSON.stringify(data).match(
      /"(?:secret|signing_secret|token|password|api_key|authorization|download_url)":/gi,
    )?.length ?? 0;
  // Room for a container nested too deep, made a marker.
  return (
    answer.length <= MAX && Buffer.byteLength(answer) + 2 * pairs + REDACTED.length * 2 * secrets <= MAX - 60
  );
}

describe('API log excerpts of answers: a scan of the text, held to the parse-redact reference', () => {
  test('secrets at any depth, in arrays, in any case, under escaped names; null stays null', () => {
    const answer =
      '{"data":{"id":"wh_1","secret":"whsec_§x","nested":[{"Token":"pw_§y"},{"to\\u006ben":{"a":"§"}}]},' +
      '"headers":{"Authorization":["Bearer §z"],"a\\"b":"kept","api\\u005fKEY":1e3},"password":null,' +
      '"download_url":{"url":"https://x/§"},"signing_secret":"whsec_§","SIGNING_SECRET":true}';
    assert.deepEqual(assertExcerpt(answer), {
      data: { id: 'wh_1', secret: REDACTED, nested: [{ Token: REDACTED }, { token: REDACTED }] },
      headers: { Authorization: REDACTED, 'a"b': 'kept', api_KEY: REDACTED },
      password: null,
      download_url: REDACTED,
      signing_secret: REDACTED,
      SIGNING_SECRET: REDACTED,
    });
    // Kept as sent: the escapes of other keys and values too.
    assert.equal(excerptOfAnswer('{"a\\u0022":"\\u00e9\\n"}', MAX), '{"a\\u0022":"\\u00e9\\n"}');
  });

  test('a secret where the bound falls: before it, inside its value, after it; never any of it', () => {
    for (let pad = 1850; pad <= 2100; pad += 1) {
      const secret = MARK.repeat(40 + (pad % 7));
      for (const answer of [
        JSON.stringify({
          pad: 'p'.repeat(pad % 500),
          more: 'q'.repeat(pad - (pad % 500)),
          token: secret,
          after: 1,
        }),
        JSON.stringify([
          { a: 'p'.repeat(400) },
          { a: 'p'.repeat(400) },
          { a: 'p'.repeat(400) },
          { a: 'p'.repeat(pad - 1600), password: secret },
        ]),
        JSON.stringify({
          list: Array.from({ length: 30 }, (_, i) => ({ id: `wh_${i}${'x'.repeat(pad % 40)}`, secret })),
        }),
        JSON.stringify({
          pad: 'p'.repeat(pad - 300),
          deep: { er: [{ api_key: { value: secret, more: [secret] } }] },
        }),
      ]) {
        const kept = assertExcerpt(answer);
        assert.ok(isPrefix(kept, redacted(JSON.parse(answer))), JSON.stringify(kept));
      }
    }
  });

  test('a list of webhooks: its first 2 KiB whole items, the next one cut, and how much is left out', () => {
    const list = JSON.stringify({
      object: 'list',
      data: Array.from({ length: 20 }, (_, i) => ({
        id: `wh_${i}`,
        url: `https://hooks.example.com/postwire/${i}`,
        events: ['email.sent', 'email.delivered'],
        has_secret: true,
      })),
      has_more: false,
    });
    const excerpt = excerptOfAnswer(list, MAX)!;
    assert.ok(Buffer.byteLength(excerpt) <= MAX && Buffer.byteLength(excerpt) > MAX - 120, excerpt);
    const kept = JSON.parse(excerpt) as { object: string; data: Array<Record<string, unknown>> };
    assert.equal(kept.object, 'list');
    const whole = kept.data.filter((item) => !('…' in item));
    assert.deepEqual(whole, (JSON.parse(list) as typeof kept).data.slice(0, whole.length));
    assert.ok(whole.length >= 15, String(whole.length));
    // The item the bound fell in ends with how much of the answer is left out from there.
    assert.match(String(Object.values(kept.data.at(-1)!).at(-1)), REST);
    assert.ok(!('has_more' in kept));
  });

  test('text that is not JSON: kept as a string, or, when it starts like JSON, as its length only', () => {
    assert.equal(
      excerptOfAnswer('From: a@example.org\r\n\r\nHi', MAX),
      '"From: a@example.org\\r\\n\\r\\nHi"',
    );
    assert.equal(excerptOfAnswer('{"token":"§', MAX), '"…(11 chars, not JSON)"');
    assert.equal(excerptOfAnswer('[1,2,]', MAX), '"…(6 chars, not JSON)"');
    assert.equal(excerptOfAnswer('{"a":1} x', MAX), '"…(9 chars, not JSON)"');
    assert.equal(excerptOfAnswer('{"a":"\u0001"}', MAX), '"…(9 chars, not JSON)"');
    assert.equal(excerptOfAnswer('', MAX), null);
    assert.equal(excerptOfAnswer(undefined, MAX), null);
  });

  test('random answers (seeded): JSON within the bound, no secret, whole when it fits, a prefix when cut', () => {
    let whole = 0;
    let cut = 0;
    let sameAsReference = 0;
    for (let seed = 1; seed <= 1500; seed += 1) {
      const rng = random(seed);
      const data = value(rng, 0);
      const answer = serialize(rng, data, seed % 3 === 0);
      const kept = assertExcerpt(answer);
      const expected = redacted(JSON.parse(answer));
      if (fitsWhole(answer, data)) {
        whole += 1;
        assert.deepEqual(kept, expected, `seed ${seed}: ${answer}`);
        // Where the reference (parse, redact, cut) cuts nothing, the two are the same.
        const reference = JSON.parse(excerptOf(JSON.parse(answer), MAX)!) as unknown;
        if (JSON.stringify(reference) === JSON.stringify(expected)) {
          sameAsReference += 1;
          assert.deepEqual(kept, reference);
        }
      } else {
        cut += 1;
        assert.ok(isPrefix(kept, expected), `seed ${seed}: ${JSON.stringify(kept)}`);
      }
      // The same answer cut short anywhere (as a stream cut off would be): still no secret, still JSON.
      for (let k = 0; k < 3; k += 1) {
        const short = answer.slice(0, rng.int(answer.length));
        if (short.trim() !== '') assertExcerpt(short);
      }
    }
    // The corpus holds both kinds, and answers the reference keeps whole.
    assert.ok(
      whole > 200 && cut > 200 && sameAsReference > 100,
      `${whole} whole, ${cut} cut, ${sameAsReference}`,
    );
  });
});
