import assert from 'node:assert/strict';
import { generateKeyPairSync, verify } from 'node:crypto';
import { test } from 'node:test';
import { dkimVerify } from 'mailauth';
import { simpleParser } from 'mailparser';
import nodemailer, { type SendMailOptions } from 'nodemailer';
import DKIM from 'nodemailer/lib/dkim';
import MessageParser, { type MessageParserHeaderLine } from 'nodemailer/lib/dkim/message-parser';
import dkimSign from 'nodemailer/lib/dkim/sign';
import MailComposer from 'nodemailer/lib/mail-composer';
import DataStream from 'nodemailer/lib/smtp-connection/data-stream';
import SMTPPool, { type SMTPPoolSentMessageInfo } from 'nodemailer/lib/smtp-pool';
import { parseAddress } from '../src/lib/addresses.ts';
import type { EmailRecord } from '../src/modules/emails/emails.repo.ts';
import { createDkimSigner } from '../src/modules/sending/dkim.ts';
import { poolMessage, writeAtOnce } from '../src/modules/sending/fast-paths.ts';
import {
  buildMessage,
  mailOptions,
  rawMailOptions,
  withCrlfLineEndings,
} from '../src/modules/sending/mime.ts';
import { dkimpyAvailable, dkimpyVerify } from './helpers/dkimpy.ts';
import { fidelityCorpus, sha256 } from './helpers/mail-corpus.ts';
import { assertWireLines, headerOf } from './helpers/received-mail.ts';
import { seeded } from './helpers/random.ts';
import { startSmtpServer } from './helpers/smtp.ts';

// What leaves is the reference's output. nodemailer builds the MIME; fast-paths.ts writes some trees at once
// instead of through its streams and hands built messages to its SMTP pool directly; dkim.ts signs. Each is
// held equal to the library here, on the fidelity corpus and on random messages, and every signed message is
// verified by mailauth and by dkimpy.

const BODY_PIECES = [
  'a',
  'b',
  'word ',
  ' ',
  '  ',
  '\t',
  '\r\n',
  '\n',
  '\r',
  '\n\n',
  'é',
  '€',
  '=',
  '.',
  '\n.\n',
  '\n..\n',
  'From ',
  '\nFrom me\n',
  'x'.repeat(90),
  '日本語',
  '😀',
  'ß',
  'ü',
  ' \n',
  '\t\r\n',
  '=?UTF-8?Q?x?=',
  '<b>',
  '&amp;',
  '"',
  "'",
] as const;
const LINE_PIECES = ['a', 'b', ' ', 'é', '€', '=', '.', '日', '😀', 'Ω', '?', '_', '"', ',', ';', ':', 'Re:'];
const NAME_PIECES = ['Ada', 'Zoë', 'Jürgen', '日本', 'O', ' ', 'Lovelace', 'Ñ', 'Ωmega', 'Smith'];

type Generator = ReturnType<typeof seeded>;

const textOf = (g: Generator, pieces: readonly string[], count: number) =>
  Array.from({ length: count }, () => g.pick(pieces)).join('');

function randomMailbox(g: Generator, local: string): string {
  const address = `${local}@example.org`;
  if (g.random() < 0.3) return address;
  const name = textOf(g, NAME_PIECES, 1 + g.below(4)).trim();
  const stored = `${name} <${address}>`;
  return name && parseAddress(stored).ok ? stored : address;
}

/** A random email as the sending worker loads it: Unicode, line endings and lengths in every part. */
function randomEmail(g: Generator, index: number): EmailRecord {
  const longWord = g.random() < 0.1 ? 'W'.repeat(900 + g.below(200)) : '';
  const subject = (textOf(g, LINE_PIECES, 1 + g.below(120)) + longWord).trim() || 'x';
  const bodyLength = g.random() < 0.1 ? 2000 + g.below(4000) : g.below(300);
  const text =
    g.random() < 0.85
      ? textOf(g, BODY_PIECES, bodyLength) + (g.random() < 0.1 ? 'L'.repeat(1500) : '')
      : null;
  const html = g.random() < 0.6 ? `<p>${textOf(g, BODY_PIECES, g.below(300))}</p>` : null;
  const attachments = Array.from({ length: g.below(3) }, (_, n) => {
    const content = Buffer.from(Array.from({ length: g.below(3000) }, () => g.below(256)));
    return {
      filename: `${textOf(g, NAME_PIECES, 1 + g.below(3)).trim() || 'file'} ${n}.bin`,
      contentType: g.pick([null, 'application/pdf', 'image/png', 'application/octet-stream']),
      contentId: g.random() < 0.3 ? `part${n}.${index}@example.org` : null,
      size: content.length,
      // As the sending worker reads a file: in the chunks it is kept in.
      content: [content],
    };
  });
  const headers: Record<string, string> =
    g.random() < 0.5
      ? { 'X-Random': (textOf(g, LINE_PIECES, 1 + g.below(200)) + longWord).trim() || 'v' }
      : {};
  return {
    id: `msg_${index}`,
    projectId: 'proj_1',
    from: randomMailbox(g, 'sender'),
    to: [randomMailbox(g, 'ada')],
    cc: g.random() < 0.3 ? [randomMailbox(g, 'grace')] : [],
    bcc: g.random() < 0.3 ? ['hidden@example.org'] : [],
    replyTo: g.random() < 0.3 ? [randomMailbox(g, 'reply')] : [],
    subject,
    html,
    text: text === null && html === null ? '' : text,
    headers,
    tags: {},
    templateId: null,
    templateVersion: null,
    messageId: `<${index}.random@acme.example>`,
    source: 'api',
    smtpUsername: null,
    attachments,
    dkimDomain: null,
    returnPathDomain: null,
    status: 'queued',
    recipientCount: 1,
    scheduledAt: null,
    createdAt: '2026-11-26T10:00:00.000Z',
    updatedAt: '2026-11-26T10:00:00.000Z',
  } as EmailRecord;
}

/** The corpus's send requests as the options nodemailer is given for them (templates and tracking aside). */
function corpusOptions(): Array<[string, SendMailOptions]> {
  return fidelityCorpus()
    .filter((message) => !message.usesTemplate)
    .map(({ name, body }) => {
      const attachments = (body.attachments ?? []) as Array<Record<string, string>>;
      return [
        name,
        {
          from: (body.from as string | undefined) ?? 'Acme <hello@acme.example>',
          to: 'Ada <ada@example.org>',
          cc: body.cc as string[] | undefined,
          replyTo: body.reply_to as string[] | undefined,
          subject: body.subject as string,
          text: body.text as string | undefined,
          html: body.html as string | undefined,
          headers: body.headers as Record<string, string> | undefined,
          attachments: attachments.map((attachment) => ({
            filename: attachment.filename!,
            content: Buffer.from(attachment.content!, 'base64'),
            ...(attachment.content_type ? { contentType: attachment.content_type } : {}),
            ...(attachment.content_id
              ? { cid: attachment.content_id, contentDisposition: 'inline' as const }
              : {}),
          })),
        },
      ];
    });
}

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
      'long lines',
      { ...base, subject: 'Long', text: 'word '.repeat(400), html: `<p>${'x'.repeat(500)}</p>` },
    ],
    ['lone CR and LF', { ...base, subject: 'Breaks', text: 'é\rone\ntwo\r\nthree\r' }],
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
    ...corpusOptions(),
  ];
  for (const [label, options] of cases) await assertSame(options, label);
});

test('random emails are written as nodemailer streams them', async () => {
  const g = seeded(42);
  for (let i = 0; i < 300; i += 1) {
    const email = randomEmail(g, i);
    await assertSame(mailOptions(email, email.to), `random ${i}`);
  }
});

test('what is not written at once is left to nodemailer', async () => {
  // Past one encoder slice, a QP content is encoded slice by slice: left to the streams.
  const big = await bothWritings({ ...base, subject: 'Big', text: `é${'a '.repeat(40_000)}` });
  assert.equal(big.atOnce, undefined);
  // QP outside text/* keeps lone line breaks as data.
  const qp = await bothWritings({
    ...base,
    attachments: [
      { filename: 'x.json', content: '{"a":"é\n"}', contentTransferEncoding: 'quoted-printable' },
    ],
  });
  assert.equal(qp.atOnce, undefined);
});

/** The message as an SMTP server receives it from nodemailer: through its DATA stream, then unstuffed. */
async function overTheWire(message: Buffer): Promise<Buffer> {
  const stream = new DataStream();
  const chunks: Buffer[] = [];
  stream.on('data', (chunk: Buffer) => chunks.push(chunk));
  const ended = new Promise((resolve) => stream.on('end', resolve));
  stream.end(message);
  await ended;
  const sent = Buffer.concat(chunks).toString('latin1');
  assert.ok(sent.endsWith('\r\n.\r\n'), 'the DATA terminator');
  // The server removes the terminator and the dot each line starting with a dot was given.
  const body = sent.slice(0, -'.\r\n'.length);
  return Buffer.from(body.replace(/^\./gm, ''), 'latin1');
}

test('line endings are made CRLF as nodemailer makes them on the wire', async () => {
  const g = seeded(7);
  const pieces = ['a', '\r', '\n', '\r\n', '\n\r', '.', '\r\n.', 'é', ' '];
  for (let i = 0; i < 300; i += 1) {
    const input = Buffer.from(`${textOf(g, pieces, g.below(200))}\r\n`, 'utf8');
    const normalized = withCrlfLineEndings(input);
    assert.equal(
      normalized.toString('latin1'),
      (await overTheWire(input)).toString('latin1'),
      `random ${i}: ${JSON.stringify(input.toString('utf8'))}`,
    );
    assert.equal((await overTheWire(normalized)).toString('latin1'), normalized.toString('latin1'));
  }
});

const keys = generateKeyPairSync('rsa', { modulusLength: 2048 });
const PRIVATE_KEY = keys.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const KEY_NAME = 'sel2026._domainkey.acme.example';
const KEY_TXT = `v=DKIM1; k=rsa; p=${keys.publicKey.export({ type: 'spki', format: 'der' }).toString('base64')}`;
const signer = createDkimSigner({ domain: 'acme.example', selector: 'sel2026', privateKey: PRIVATE_KEY });

/** The `bh=` nodemailer's own DKIM signer computes for a message. */
async function nodemailerBodyHash(message: Buffer): Promise<string> {
  const dkim = new DKIM({ domainName: 'acme.example', keySelector: 'sel2026', privateKey: PRIVATE_KEY });
  const chunks: Buffer[] = [];
  for await (const chunk of dkim.sign(message)) chunks.push(chunk as Buffer);
  return /\bbh=([^;\s]+)/.exec(headerOf(Buffer.concat(chunks)))![1]!;
}

/**
 * Whether our signature's `b=` signs the header data nodemailer's signer canonicalizes for the same `h=`
 * (each name once: the messages built here have every signed header once, and an over-signed name adds no
 * data for an instance that does not exist) followed by our DKIM-Signature field, relaxed, with `b=` empty.
 */
async function signsNodemailersHeaderData(unsigned: Buffer, signature: string): Promise<boolean> {
  const parser = new MessageParser();
  const parsed = new Promise<MessageParserHeaderLine[]>((resolve) => parser.once('headers', resolve));
  parser.resume();
  parser.end(unsigned);
  const names = [...new Set(/\bh=([^;]+)/.exec(signature)![1]!.replace(/\s/g, '').split(':'))];
  const { headers } = dkimSign.relaxedHeaders(await parsed, names.join(':'));
  const ownField = signature
    .replace(/\bb=[^;]*$/, 'b=')
    .replace(/[ \t]+/g, ' ')
    .trim();
  const data = `${headers}dkim-signature:${ownField}`;
  const b = /\bb=([^;]*)$/.exec(signature)![1]!.replace(/\s/g, '');
  return verify('sha256', Buffer.from(data, 'latin1'), keys.publicKey, Buffer.from(b, 'base64'));
}

const unfoldedSignature = (message: Buffer) =>
  /^DKIM-Signature:(.*(?:\r\n[ \t].*)*)/im.exec(headerOf(message))![1]!.replace(/\r\n[ \t]/g, ' ');

const lf = (text: string) => text.replace(/\r\n|\r/g, '\n');

test('300 random emails: built, signed, verified by mailauth and dkimpy, and read back intact', async () => {
  const g = seeded(2026);
  const signed: Buffer[] = [];
  for (let i = 0; i < 300; i += 1) {
    const email = randomEmail(g, i);
    const label = `random ${i}`;
    const options = mailOptions(email, email.to);
    const unsigned = await buildMessage(options, undefined);
    const message = signer.sign(unsigned);
    assertWireLines(message, label);
    // What is signed is what travels: nodemailer's DATA stream leaves it as it is.
    assert.ok((await overTheWire(message)).equals(message), `${label}: changed on the wire`);

    // The body hash is nodemailer's, on the same bytes.
    const signature = unfoldedSignature(message);
    assert.equal(/\bbh=([^;\s]+)/.exec(signature)![1], await nodemailerBodyHash(unsigned), `${label}: bh=`);
    // And its header data is nodemailer's canonicalization of the same fields.
    assert.ok(await signsNodemailersHeaderData(unsigned, signature), `${label}: header data`);
    const verdict = await dkimVerify(message, {
      resolver: async (name: string) => {
        if (name !== KEY_NAME) throw Object.assign(new Error('no such name'), { code: 'ENOTFOUND' });
        return [[KEY_TXT]];
      },
    } as never);
    assert.deepEqual(
      verdict.results.map((result: any) => result.status.result),
      ['pass'],
      `${label}: mailauth ${JSON.stringify(verdict.results.map((result: any) => result.status))}`,
    );

    const parsed = await simpleParser(message, { skipImageLinks: true });
    assert.equal(parsed.subject, email.subject.trim(), `${label}: subject`);
    if (email.text)
      assert.equal(
        lf(parsed.text ?? '').replace(/\n$/, ''),
        lf(email.text).replace(/\n$/, ''),
        `${label}: text`,
      );
    if (email.html)
      assert.equal(
        lf(String(parsed.html)).replace(/\n$/, ''),
        lf(email.html).replace(/\n$/, ''),
        `${label}: html`,
      );
    assert.deepEqual(
      parsed.attachments.map((attachment) => sha256(attachment.content)).sort(),
      email.attachments.map((attachment) => sha256(Buffer.concat(attachment.content!))).sort(),
      `${label}: attachments`,
    );
    assert.doesNotMatch(headerOf(message), /^bcc:/im, `${label}: no Bcc`);
    signed.push(message);
  }
  if (!dkimpyAvailable()) throw new Error('dkimpy (python3-dkim) is needed: .ci/run installs it');
  const verdicts = await dkimpyVerify(signed, { [KEY_NAME]: KEY_TXT });
  verdicts.forEach((verdict, index) => assert.ok(verdict.pass, `random ${index}: dkimpy ${verdict.detail}`));
});

test("the relay's pool message arrives as sendMail() sends the same built message", async () => {
  const server = await startSmtpServer({ dsn: true });
  const direct = new SMTPPool({ host: '127.0.0.1', port: server.port, pool: true, maxConnections: 1 });
  const reference = nodemailer.createTransport({
    host: '127.0.0.1',
    port: server.port,
    pool: true,
    maxConnections: 1,
  });
  try {
    const g = seeded(99);
    const envelopes = [
      { from: 'bounce+abc@bounces.acme.example', to: ['ada@example.org'] },
      { from: 'hello@acme.example', to: ['ada@example.org', 'grace@example.org'] },
      // Not in the stored form: nodemailer's own envelope parsing (IDN, upper case) handles these.
      { from: 'hello@ACME.example', to: ['ada@bücher.example'] },
    ];
    for (const [index, envelope] of envelopes.entries()) {
      const email = randomEmail(g, index);
      const message = mailOptions(email, envelope.to, envelope.from, index === 0 ? ['failure', 'delay'] : []);
      const options = rawMailOptions(message, await buildMessage(message, signer));
      await new Promise<SMTPPoolSentMessageInfo>((resolve, reject) =>
        direct.send(poolMessage(options, email.messageId, new AbortController().signal), (error, info) =>
          error || !info ? reject(error ?? new Error('nothing sent')) : resolve(info),
        ),
      );
      await reference.sendMail(options);
      const [ours, theirs] = await server.waitFor(2 * (index + 1)).then((all) => all.slice(-2));
      assert.ok(ours && theirs);
      assert.equal(ours.from, theirs.from, `${index}: MAIL FROM`);
      assert.deepEqual(ours.to, theirs.to, `${index}: RCPT TO`);
      assert.deepEqual(ours.dsn, theirs.dsn, `${index}: DSN request`);
      assert.ok(ours.bytes.equals(theirs.bytes), `${index}: the same bytes`);
      assert.ok(ours.bytes.equals(options.raw as Buffer), `${index}: the bytes built and signed`);
    }
  } finally {
    direct.close();
    reference.close();
    await server.close();
  }
});
