import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { SendMailOptions } from 'nodemailer';
import MailComposer from 'nodemailer/lib/mail-composer';
import { writeAtOnce } from '../src/modules/sending/mime.ts';

// The sending worker writes a compiled message at once instead of through nodemailer's streams
// (src/modules/sending/mime.ts): the bytes must be exactly those nodemailer's build() writes for the same tree.

/** Both writings of one compiled tree (one tree, so the same boundaries); undefined when not written at once. */
async function bothWritings(options: SendMailOptions) {
  const root = new MailComposer({
    messageId: '<fixed@example.com>',
    date: new Date('2026-11-24T03:00:00.000Z'),
    ...options,
  }).compile();
  const atOnce = writeAtOnce(root);
  const streamed = await root.build();
  return { atOnce, streamed };
}

async function assertSame(options: SendMailOptions, label: string) {
  const { atOnce, streamed } = await bothWritings(options);
  assert.ok(atOnce, `${label}: written at once`);
  assert.equal(atOnce.toString('latin1'), streamed.toString('latin1'), label);
}

const base = { from: 'Shop <shop@example.com>', to: 'Ada <ada@example.org>' };

test('a message written at once is byte for byte what nodemailer streams', async () => {
  const cases: Array<[string, SendMailOptions]> = [
    ['text only', { ...base, subject: 'Hi', text: 'Hello' }],
    ['html and text', { ...base, subject: 'Receipt #1', html: '<p>Hi <b>1</b></p>', text: 'Hi 1' }],
    ['html only', { ...base, subject: 'Hi', html: '<p>Hi</p>' }],
    ['no body', { ...base, subject: 'Empty' }],
    ['empty text', { ...base, subject: 'Empty', text: '' }],
    [
      'unicode everywhere',
      {
        from: 'Zoë Ümlaut <zoe@example.com>',
        to: ['Jürgen <j@example.org>', 'b@example.org'],
        cc: 'Ça va <cc@example.org>',
        replyTo: 'r@example.org',
        subject: 'Grüße, € and 日本語 in a subject long enough to be folded over more than one header line',
        text: 'Grüße\r\nZweite Zeile mit € und = Zeichen\n',
        html: '<p>日本語のテキスト</p>'.repeat(40),
      },
    ],
    [
      'long lines',
      { ...base, subject: 'Long', text: 'word '.repeat(400), html: `<p>${'x'.repeat(500)}</p>` },
    ],
    [
      'trailing whitespace',
      { ...base, subject: 'Spaces', text: 'é line with spaces   \r\nand tabs\t\t\n  \t ' },
    ],
    ['lone CR and LF', { ...base, subject: 'Breaks', text: 'é\rone\ntwo\r\nthree\r' }],
    ['dots and equals', { ...base, subject: 'Dots', text: '.\r\n..\r\n=3D é =\r\n.' }],
    [
      'headers',
      {
        ...base,
        subject: 'H',
        text: 'x',
        headers: { 'X-Entity': 'é value', 'List-Unsubscribe': '<https://u>' },
      },
    ],
    [
      'attachments',
      {
        ...base,
        subject: 'Files',
        html: '<img src="cid:logo">',
        text: 'See attached',
        attachments: [
          { filename: 'a.bin', content: Buffer.from([0, 1, 2, 255, 13, 10, 13]) },
          { filename: 'b.csv', content: Buffer.from('név,érték\r\n1,2\n'), contentType: 'text/csv' },
          { filename: 'c.txt', content: 'plain ascii\r\n' },
          { filename: 'logo.png', content: Buffer.alloc(300, 7), cid: 'logo', contentDisposition: 'inline' },
          { filename: 'exact.bin', content: Buffer.alloc(57 * 4, 1) },
        ],
      },
    ],
  ];
  for (const [label, options] of cases) await assertSame(options, label);
});

test('random texts are written as nodemailer streams them', async () => {
  const alphabet = ['a', 'b', ' ', ' ', '\t', '\r\n', '\n', '\r', 'é', '€', '=', '.', 'x'.repeat(90), '日'];
  let seed = 42;
  const random = () => {
    seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  const text = (length: number) =>
    Array.from({ length }, () => alphabet[Math.floor(random() * alphabet.length)]).join('');
  for (let i = 0; i < 300; i += 1) {
    const length = Math.floor(random() * (i % 10 === 0 ? 3000 : 200));
    await assertSame({ ...base, subject: text(20), text: text(length), html: text(length) }, `random ${i}`);
  }
});

test('what is not written at once is left to nodemailer', async () => {
  // Past one encoder slice, a QP content is encoded slice by slice: left to the streams.
  const big = await bothWritings({ ...base, subject: 'Big', text: `é${'a '.repeat(40_000)}` });
  assert.equal(big.atOnce, undefined);
  const raw = await bothWritings({ raw: 'Subject: raw\r\n\r\nbody\r\n' });
  assert.equal(raw.atOnce, undefined);
  // QP outside text/* keeps lone line breaks as data.
  const qp = await bothWritings({
    ...base,
    attachments: [
      { filename: 'x.json', content: '{"a":"é\n"}', contentTransferEncoding: 'quoted-printable' },
    ],
  });
  assert.equal(qp.atOnce, undefined);
});
