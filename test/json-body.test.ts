import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import Fastify from 'fastify';
import { LARGE_BODY_BYTES } from '../src/http/json-body.ts';
import { jsonBodyOf } from '../src/http/json-text.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { seeded } from './helpers/random.ts';

// JSON request bodies (http/json-body.ts): a small body is parsed on the event loop, one larger than
// LARGE_BODY_BYTES on a thread, its base64 files decoded there. Two differential tests hold that:
// - the parse is Fastify's own (its default JSON parser is the reference), on a corpus and on random input;
// - a body answers the same parsed either way: each body of a corpus is sent as it is and padded with white
//   space past LARGE_BODY_BYTES (the same JSON), and the two answers and what they stored are compared.

const fastifyParse = Fastify().getDefaultJsonParser('error', 'error');

/** What Fastify's default parser makes of `text`: the value, or its error's code. */
function libraryParse(text: string): { value: unknown } | { code: string } {
  let result: { value: unknown } | { code: string } | undefined;
  fastifyParse({} as never, text, (error: (Error & { code?: string }) | null, value: unknown) => {
    result = error ? { code: error.code ?? 'error' } : { value };
  });
  return result!;
}

const FAULT_CODES: Record<string, string> = {
  empty: 'FST_ERR_CTP_EMPTY_JSON_BODY',
  invalid: 'FST_ERR_CTP_INVALID_JSON_BODY',
};

/** A random JSON value: nested objects and arrays, strings with escapes and Unicode, odd keys. */
function randomValue(random: () => number, depth: number): unknown {
  const below = (n: number) => Math.floor(random() * n);
  const pieces = ['a', 'é', '☕', '𝄞', '"', '\\', '\n', '\t', '\u0001', '/', ' ', 'constructor', 'prototype'];
  const text = () => Array.from({ length: below(12) }, () => pieces[below(pieces.length)]).join('');
  const kind = depth <= 0 ? below(4) : below(6);
  switch (kind) {
    case 0:
      return text();
    case 1:
      return random() < 0.5 ? below(1e6) - 5e5 : random() * 1e9;
    case 2:
      return [true, false, null][below(3)];
    case 3:
      return text();
    case 4:
      return Array.from({ length: below(4) }, () => randomValue(random, depth - 1));
    default:
      return Object.fromEntries(
        Array.from({ length: below(4) }, () => [
          random() < 0.1 ? '__proto__' : text(),
          randomValue(random, depth - 1),
        ]),
      );
  }
}

/** JSON text as a client might send it, right or broken: cut, a byte changed, a key made `__proto__`. */
function randomText(random: () => number): string {
  const text = JSON.stringify(randomValue(random, 4));
  const roll = random();
  if (roll < 0.15) return text.slice(0, Math.floor(random() * text.length));
  if (roll < 0.3) {
    const at = Math.floor(random() * text.length);
    return text.slice(0, at) + '{}[]",:\\ x0'[Math.floor(random() * 12)] + text.slice(at + 1);
  }
  if (roll < 0.35) return `{"__proto__":{"x":1},"a":${text}}`;
  if (roll < 0.4) return `{"constructor":{"prototype":{"x":1}},"a":${text}}`;
  return text;
}

describe('a JSON body is parsed as Fastify parses it (its default parser is the reference)', () => {
  const corpus = [
    '',
    ' ',
    '{}',
    '[]',
    'null',
    '"text"',
    '{"a":1,"b":[1,2,{"c":"é☕𝄞"}]}',
    '{"a":"\\u00e9\\ud834\\udd1e\\n"}',
    '{"a":1,}',
    '{"a":01}',
    "{'a':1}",
    '{"__proto__":{"admin":true}}',
    '{"a":{"__proto__":{}}}',
    '{"constructor":{"prototype":{"admin":true}}}',
    '{"constructor":{"x":1}}',
    '{"a":1} trailing',
    '\ufeff{"a":1}',
    '{"a":"\u0007"}',
    `{"deep":${'['.repeat(40)}${']'.repeat(40)}}`,
    '1e400',
    '{"a":1}\n\n   ',
  ];

  const compare = (written: string) => {
    // As bytes on the wire (a string cut inside a surrogate pair is sent as U+FFFD), read back as Fastify does.
    const bytes = Buffer.from(written, 'utf8');
    const text = bytes.toString('utf8');
    const ours = jsonBodyOf(bytes);
    const library = libraryParse(text);
    if ('value' in ours) {
      assert.ok('value' in library, `${JSON.stringify(text)}: we parse it, Fastify refuses it`);
      assert.deepEqual(ours.value, library.value, JSON.stringify(text));
    } else if (ours.fault === 'empty' || ours.fault === 'invalid') {
      assert.deepEqual(library, { code: FAULT_CODES[ours.fault] }, JSON.stringify(text));
    } else {
      // Our own rules past Fastify's (depth, U+0000): only for what it parses.
      assert.ok('value' in library, `${JSON.stringify(text)}: ${ours.fault}`);
    }
  };

  test('a corpus of bodies, right and wrong', () => {
    for (const text of corpus) compare(text);
  });

  test('random bodies, right and broken', () => {
    const { random } = seeded(34);
    for (let round = 0; round < 3000; round++) compare(randomText(random));
  });
});

for (const engine of ALL_ENGINES) {
  describe(`a large body answers as the same body small (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    before(async () => {
      api = await startTestApp(engine);
      await api.request('POST', '/v1/domains', { body: { name: 'acme.example' } });
    });
    after(() => api?.close());

    const send = {
      from: 'Acme <hello@acme.example>',
      to: ['ada@example.org'],
      subject: 'Figures ✓',
      text: 'Line one\nLine two — Grüße\n',
    };
    const file = (content: string, extra: Record<string, unknown> = {}) => ({
      ...send,
      attachments: [{ filename: 'a.bin', content, ...extra }],
    });
    const base64 = randomBytes(3000).toString('base64');
    const corpus: Array<[string, string, string]> = [
      ['a file', '/v1/emails', JSON.stringify(file(base64))],
      [
        'a file wrapped at 76 columns, unpadded',
        '/v1/emails',
        JSON.stringify(file(base64.replace(/(.{76})/g, '$1\r\n').replace(/=+$/, ''))),
      ],
      [
        'two files and an inline one',
        '/v1/emails',
        JSON.stringify({
          ...send,
          html: '<img src="cid:logo">',
          attachments: [
            { filename: 'a.txt', content: 'aGk=' },
            { filename: 'logo.png', content: base64, content_id: 'logo' },
          ],
        }),
      ],
      ['a file that is not base64', '/v1/emails', JSON.stringify(file('not base64!'))],
      ['a file with = inside', '/v1/emails', JSON.stringify(file('aGk=aGk='))],
      ['an empty file', '/v1/emails', JSON.stringify(file(''))],
      ['a file as a number', '/v1/emails', JSON.stringify(file(12 as never))],
      ['files as a string', '/v1/emails', JSON.stringify({ ...send, attachments: 'aGk=' })],
      [
        'a file name made empty',
        '/v1/emails',
        JSON.stringify({ ...send, attachments: [{ filename: '../', content: 'aGk=' }] }),
      ],
      ["a client's copy of a decoded field's token", '/v1/emails', JSON.stringify(file('\u0000decoded:0'))],
      ['U+0000 in the subject', '/v1/emails', JSON.stringify({ ...file('aGk='), subject: 'a\u0000b' })],
      ['not JSON', '/v1/emails', '{"from": '],
      ['__proto__', '/v1/emails', '{"__proto__":{"x":1}}'],
      ['nested too deep', '/v1/emails', `{"tags":${'['.repeat(70)}${']'.repeat(70)}}`],
      ['a batch with files', '/v1/emails/batch', JSON.stringify([file(base64), file('aGk=')])],
      ['a batch with a bad file', '/v1/emails/batch', JSON.stringify([file(base64), file('%%%')])],
      ["Resend's send with a file", '/resend/emails', JSON.stringify(file(base64))],
      ["Resend's batch with a bad file", '/resend/emails/batch', JSON.stringify([file('aGk='), file('%%%')])],
    ];

    /** What a client sees of an answer, ids aside, and what the stored email says of its files. */
    async function seen(path: string, body: string) {
      const before = await api.rowCounts();
      const response = await api.request('POST', path, {
        rawBody: body,
        headers: { 'content-type': 'application/json' },
      });
      const answer = response.body as Record<string, any>;
      if (answer?.error) delete answer.error.request_id;
      // Resend's error shape, and an accepted send's id, differ per request.
      const ids: string[] =
        response.status < 300
          ? ((Array.isArray(answer.data) ? answer.data : [answer]) as Array<{ id: string }>).map((e) => e.id)
          : [];
      const files = [];
      for (const id of ids) {
        const email = await api.request('GET', `/v1/emails/${id}`);
        files.push(email.body.attachments);
      }
      const after = await api.rowCounts();
      // send_quota's rows are counters the sends of a day share, not what one send stored.
      const stored = Object.fromEntries(
        Object.keys(after)
          .filter((table) => table !== 'send_quota' && after[table] !== before[table])
          .map((table) => [table, after[table]! - before[table]!]),
      );
      return { status: response.status, answer: ids.length > 0 ? 'accepted' : answer, files, stored };
    }

    test('an Idempotency-Key tells two large bodies with different files apart, and replays the same one', async () => {
      const large = (content: string) => JSON.stringify(file(content)) + ' '.repeat(LARGE_BODY_BYTES);
      const post = (body: string) =>
        api.request('POST', '/v1/emails', {
          rawBody: body,
          headers: { 'content-type': 'application/json', 'idempotency-key': 'large-files-1' },
        });
      const first = await post(large(base64));
      assert.equal(first.status, 202);
      const again = await post(large(base64));
      assert.deepEqual([again.status, again.body], [202, first.body], 'the same send is answered as before');
      const other = await post(large(randomBytes(3000).toString('base64')));
      assert.equal(other.status, 422);
      assert.equal(other.body.error.code, 'idempotency_key_reused');
    });

    for (const [name, path, body] of corpus) {
      test(name, async () => {
        assert.ok(body.length < LARGE_BODY_BYTES, 'the small body is small');
        const padded = body + ' '.repeat(LARGE_BODY_BYTES + 1024 - body.length);
        const small = await seen(path, body);
        const large = await seen(path, padded);
        assert.deepEqual(large, small);
      });
    }
  });
}
