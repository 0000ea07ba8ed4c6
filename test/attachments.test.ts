import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { simpleParser } from 'mailparser';
import { Resend } from 'resend';
import { decodeBase64 } from '../src/lib/base64.ts';
import { attachmentContentType, sanitizeFilename } from '../src/modules/emails/attachments.ts';
import { EVENT_KIND_NAMES } from '../src/modules/event-kinds/event-kinds.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { type ReceivedMessage, startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';
import { until } from './helpers/until.ts';
import { startSendingWorker } from './helpers/sending.ts';

// Attachments arrive byte for byte at a real SMTP server (parsed back with mailparser), and the official
// `resend` SDK, pointed at Postwire by RESEND_BASE_URL alone, sends, reads, batches and cancels.

// A PNG's signature and a PDF's header in front of random bytes: real types, content no compressor shrinks.
const png = Buffer.concat([Buffer.from('89504e470d0a1a0a', 'hex'), randomBytes(4000)]);
const pdf = Buffer.concat([Buffer.from('%PDF-1.7\n'), randomBytes(5 * 1024 * 1024)]);

for (const engine of ALL_ENGINES) {
  describe(`attachments and the Resend SDK (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let relay: TestSmtpServer;
    let receiver: Receiver;
    let worker: SendingWorker;

    const relayed = (emailId: string): Promise<ReceivedMessage> =>
      until(
        () => relay.messages.find((message) => message.messageId?.startsWith(`<${emailId}@`)),
        15_000,
        `the relay to receive ${emailId}`,
      );

    const countEmails = async () =>
      Number(
        (
          await api.database.handle.db
            .selectFrom('emails')
            .select((eb) => eb.fn.countAll<number>().as('n'))
            .executeTakeFirstOrThrow()
        ).n,
      );

    before(async () => {
      api = await startTestApp(engine, { allowPrivateUrls: true, worker: true });
      relay = await startSmtpServer();
      receiver = await startReceiver();
      const webhook = await api.request('POST', '/v1/webhooks', {
        body: { url: receiver.url, events: EVENT_KIND_NAMES },
      });
      assert.equal(webhook.status, 201);
      worker = await startSendingWorker(api, {
        relayPort: relay.port,
        relayTimeoutMs: 10_000,
        settings: { schedule: [0, 50], concurrency: 4, concurrencyPerHost: 4, timeoutMs: 10_000, jitter: 0 },
      });
    });

    after(async () => {
      await worker?.stop();
      await receiver?.close();
      await relay?.close();
      await api?.close();
    });

    test('a 5 MB PDF and an inline PNG arrive byte-identical, also on the retry after a 451', async () => {
      relay.scriptData({ code: 451, message: '4.3.0 Try again' });
      const sent = await api.request('POST', '/v1/emails', {
        body: {
          from: 'Shop <shop@example.com>',
          to: ['ada@example.org'],
          subject: 'Your invoice',
          html: '<p>Invoice attached</p><img src="cid:logo@shop">',
          attachments: [
            { filename: '../../invoice 4711.pdf', content: pdf.toString('base64') },
            {
              filename: 'logo.png',
              content: png.toString('base64'),
              content_type: 'image/png',
              content_id: 'logo@shop',
            },
          ],
        },
      });
      assert.equal(sent.status, 202, JSON.stringify(sent.body));
      const message = await relayed(sent.body.id);
      assert.equal(relay.messages.filter((m) => m.messageId === message.messageId).length, 1);
      const parsed = await simpleParser(message.raw);
      // The inline image travels in the html's multipart/related part, the PDF beside it.
      const invoice = parsed.attachments.find((a) => a.contentType === 'application/pdf');
      const logo = parsed.attachments.find((a) => a.contentType === 'image/png');
      assert.equal(parsed.attachments.length, 2);
      assert.equal(invoice!.filename, 'invoice 4711.pdf', 'no directories in a file name');
      assert.equal(invoice!.contentType, 'application/pdf', 'the type from the file name');
      assert.ok(invoice!.content.equals(pdf), 'the PDF, byte for byte');
      assert.equal(logo!.filename, 'logo.png');
      assert.equal(logo!.contentType, 'image/png');
      assert.equal(logo!.cid, 'logo@shop');
      assert.equal(logo!.contentDisposition, 'inline');
      assert.ok(logo!.content.equals(png), 'the PNG, byte for byte');

      const shown = await api.request('GET', `/v1/emails/${sent.body.id}`);
      assert.deepEqual(shown.body.attachments, [
        { filename: 'invoice 4711.pdf', content_type: 'application/pdf', content_id: null, size: pdf.length },
        { filename: 'logo.png', content_type: 'image/png', content_id: 'logo@shop', size: png.length },
      ]);
      const attempts = shown.body.recipients[0].attempts;
      assert.equal(attempts, 2, 'sent on the retry, from what was stored');
    });

    test('base64 as MIME libraries write it, wrapped or unpadded, arrives byte for byte, typed as the MIME says', async () => {
      // Three lengths, so the base64 ends with '==', '=' and no padding at all.
      const files = [randomBytes(3000), randomBytes(3001), randomBytes(3002), randomBytes(10)];
      const b64 = (bytes: Buffer) => bytes.toString('base64');
      const wrap = (text: string, newline: string) => text.match(/.{1,76}/g)!.join(newline);
      const unpad = (text: string) => text.replace(/=+$/, '');
      const longId = `${'x'.repeat(240)}@shop.example`;
      const attachments = [
        // As nodemailer, Python's email package and most MIME libraries write it: 76 columns, CRLF.
        { filename: 'wrapped-crlf.bin', content: `${wrap(b64(files[0]!), '\r\n')}\r\n` },
        // As `base64` and Python's base64.encodebytes write it: 76 columns, LF.
        { filename: 'wrapped-lf.pdf', content: `${wrap(b64(files[1]!), '\n')}\n` },
        // Without the '=' padding (base64url-style encoders, JWT libraries).
        { filename: 'unpadded.txt', content: unpad(b64(files[0]!)) },
        { filename: 'wrapped-unpadded', content: wrap(unpad(b64(files[1]!)), '\r\n') },
        // A name without an extension is looked up as one by nodemailer: `c` is C source, text/plain.
        { filename: 'c', content: b64(files[2]!) },
        { filename: 'data.json', content: b64(files[3]!) },
        {
          filename: 'photo.JPG',
          content: b64(files[2]!),
          content_type: 'Image/JPEG',
          content_id: '<photo.1$x@shop.example>',
        },
        { filename: 'long-id.png', content: b64(files[3]!), content_id: longId },
      ];
      const expected = [files[0], files[1], files[0], files[1], files[2], files[3], files[2], files[3]];
      const sent = await api.request('POST', '/v1/emails', {
        body: {
          from: 'shop@example.com',
          to: 'ada@example.org',
          subject: 'Files',
          html: `<p>Files</p><img src="cid:photo.1$x@shop.example"><img src="cid:${longId}">`,
          attachments,
        },
      });
      assert.equal(sent.status, 202, JSON.stringify(sent.body));
      const shown = (await api.request('GET', `/v1/emails/${sent.body.id}`)).body.attachments;
      assert.deepEqual(
        shown.map((a: any) => [a.filename, a.content_type, a.content_id, a.size]),
        [
          ['wrapped-crlf.bin', 'application/octet-stream', null, 3000],
          ['wrapped-lf.pdf', 'application/pdf', null, 3001],
          ['unpadded.txt', 'text/plain', null, 3000],
          ['wrapped-unpadded', 'application/octet-stream', null, 3001],
          ['c', 'text/plain', null, 3002],
          ['data.json', 'application/json', null, 10],
          ['photo.JPG', 'image/jpeg', 'photo.1$x@shop.example', 3002],
          ['long-id.png', 'image/png', longId, 10],
        ],
      );

      // What left: every file decoded exactly, with the type and Content-ID the API shows.
      const parsed = await simpleParser((await relayed(sent.body.id)).raw);
      assert.equal(parsed.attachments.length, attachments.length);
      for (const [index, view] of shown.entries()) {
        const part = parsed.attachments.find((attachment) => attachment.filename === view.filename);
        assert.ok(part, `${view.filename} is in the message`);
        assert.ok(part.content.equals(expected[index]!), `${view.filename}: byte for byte`);
        assert.equal(part.contentType, view.content_type, `${view.filename}: the type the MIME says`);
        assert.equal(part.cid, view.content_id ?? undefined, `${view.filename}: the Content-ID as given`);
      }
    });

    test('41 MB of attachments is refused and nothing is stored', async () => {
      const before = await countEmails();
      const big = Buffer.alloc(41 * 1024 * 1024, 7).toString('base64');
      const response = await api.request('POST', '/v1/emails', {
        body: {
          from: 'shop@example.com',
          to: 'ada@example.org',
          subject: 'Too much',
          text: 'x',
          attachments: [{ filename: 'big.bin', content: big }],
        },
      });
      assert.equal(response.status, 422);
      assert.equal(response.body.error.code, 'attachments_too_large');
      assert.equal(response.body.error.param, 'attachments[0].content');
      assert.equal(await countEmails(), before);
    });

    test('bad attachments are a 422 naming the field; nothing is stored', async () => {
      const before = await countEmails();
      const base = { from: 'shop@example.com', to: 'ada@example.org', subject: 'x', text: 'x' };
      const cases: Array<[unknown, string]> = [
        [[{ filename: 'a.txt', content: 'not base64!' }], 'attachments[0].content'],
        [[{ filename: 'a.txt', content: 'YWJj' }, { content: 'YWJj' }], 'attachments[1].filename'],
        [[{ filename: '...', content: 'YWJj' }], 'attachments[0].filename'],
        [[{ filename: 'a.txt', content: 'YWJj', content_type: 'text' }], 'attachments[0].content_type'],
        [[{ filename: 'a.txt', content: 'YWJj', path: 'https://example.com/a.txt' }], 'attachments[0].path'],
        // Not base64: a length no encoding has, '=' inside, padding on a wrong length, a tab, base64url's '-'.
        [[{ filename: 'a.txt', content: 'YWJjZ' }], 'attachments[0].content'],
        [[{ filename: 'a.txt', content: 'YW=j' }], 'attachments[0].content'],
        [[{ filename: 'a.txt', content: 'YWJjZA=' }], 'attachments[0].content'],
        [[{ filename: 'a.txt', content: 'YWJj\tZA==' }], 'attachments[0].content'],
        [[{ filename: 'a.txt', content: 'YW-j' }], 'attachments[0].content'],
        // A content_id nodemailer would change (it removes '<' and '>') is refused, not sent changed.
        ...['a>b@c', '<a@b', 'a@b>', '<<a@b>>', 'a b@c', 'a<b>@c', 'é@c'].map(
          (contentId): [unknown, string] => [
            [
              { filename: 'a.txt', content: 'YWJj' },
              { filename: 'b.png', content: 'YWJj', content_id: contentId },
            ],
            'attachments[1].content_id',
          ],
        ),
      ];
      for (const [attachments, param] of cases) {
        const response = await api.request('POST', '/v1/emails', { body: { ...base, attachments } });
        assert.equal(response.status, 422, JSON.stringify(response.body));
        assert.equal(response.body.error.param, param, JSON.stringify(attachments));
        if (param.endsWith('content_id')) {
          const given = (attachments as Array<{ content_id?: string }>)[1]!.content_id;
          assert.equal(
            response.body.error.message,
            `The content_id '${given}' cannot be sent as it is: a content_id is printable ASCII without spaces or angle brackets (it may be enclosed in one pair, '<id>').`,
          );
        }
      }
      const batch = await api.request('POST', '/v1/emails/batch', {
        body: [base, { ...base, attachments: [{ filename: 'a', content: '%%%%' }] }],
      });
      assert.equal(batch.status, 422);
      assert.equal(batch.body.error.param, '[1].attachments[0].content');
      assert.equal(await countEmails(), before);
    });

    test('the official resend SDK, pointed here by RESEND_BASE_URL: send, get, batch, cancel', async () => {
      const previous = process.env.RESEND_BASE_URL;
      process.env.RESEND_BASE_URL = `${api.baseUrl}/v1`;
      try {
        const resend = new Resend(api.key);
        const sent = await resend.emails.send({
          from: 'Acme <hello@acme.example>',
          to: ['ada@example.org'],
          subject: 'Receipt',
          html: '<p>Thanks</p>',
          replyTo: 'support@acme.example',
          headers: { 'X-Entity-Ref-ID': 'order-4711' },
          tags: [{ name: 'category', value: 'receipt' }],
          attachments: [{ filename: 'receipt.txt', content: Buffer.from('Total: 42 EUR\n') }],
        });
        assert.equal(sent.error, null, JSON.stringify(sent.error));
        const id = sent.data!.id;
        const message = await relayed(id);
        const parsed = await simpleParser(message.raw);
        assert.equal(parsed.replyTo?.text, 'support@acme.example');
        assert.equal(parsed.headers.get('x-entity-ref-id'), 'order-4711');
        assert.equal(parsed.attachments[0]!.content.toString(), 'Total: 42 EUR\n');
        const event = await until(
          () =>
            receiver.requests
              .map((request) => JSON.parse(request.body))
              .find((item) => item.type === 'email.sent' && item.data.email_id === id),
          8000,
          'email.sent',
        );
        assert.deepEqual(event.data.tags, { category: 'receipt' });

        const got = await resend.emails.get(id);
        assert.equal(got.error, null);
        assert.equal(got.data!.id, id);
        assert.equal(got.data!.object, 'email');

        const batch = await resend.batch.send([
          { from: 'hello@acme.example', to: 'bob@example.org', subject: 'One', text: 'one' },
          { from: 'hello@acme.example', to: 'eve@example.org', subject: 'Two', text: 'two' },
        ]);
        assert.equal(batch.error, null, JSON.stringify(batch.error));
        assert.equal(batch.data!.data.length, 2);

        const scheduled = await resend.emails.send({
          from: 'hello@acme.example',
          to: 'later@example.org',
          subject: 'Later',
          text: 'later',
          scheduledAt: new Date(Date.now() + 3_600_000).toISOString(),
        });
        assert.equal(scheduled.error, null, JSON.stringify(scheduled.error));
        const cancelled = await resend.emails.cancel(scheduled.data!.id);
        assert.equal(cancelled.error, null, JSON.stringify(cancelled.error));
        assert.equal(cancelled.data!.id, scheduled.data!.id);
        assert.equal((await api.request('GET', `/v1/emails/${scheduled.data!.id}`)).body.status, 'cancelled');

        const refused = await resend.emails.send({
          from: 'nobody',
          to: 'ada@example.org',
          subject: 'x',
          text: 'x',
        });
        assert.equal(refused.data, null);
        assert.ok(refused.error, 'a refusal comes back as the SDK error');
      } finally {
        if (previous === undefined) delete process.env.RESEND_BASE_URL;
        else process.env.RESEND_BASE_URL = previous;
      }
    });
  });
}

test('base64 is decoded exactly, with or without line breaks and padding', () => {
  for (let length = 0; length <= 64; length++) {
    const bytes = randomBytes(length);
    const encoded = bytes.toString('base64');
    for (const variant of [
      encoded,
      encoded.replace(/=+$/, ''),
      encoded.replace(/.{1,8}/g, '$&\r\n'),
      encoded.replace(/=+$/, '').replace(/.{1,5}/g, '$&\n'),
    ]) {
      assert.deepEqual(decodeBase64(variant), bytes, `${length} bytes as ${JSON.stringify(variant)}`);
    }
  }
  for (const bad of ['Y', 'YWJjZ', 'YW=j', '=', 'YWJjZA=', 'YWJjZA===', 'YW J', 'YW_j', 'YWJj\u0000']) {
    assert.equal(decodeBase64(bad), undefined, JSON.stringify(bad));
  }
});

test('a file without a content type is typed as nodemailer types it', () => {
  assert.equal(attachmentContentType('report.PDF'), 'application/pdf');
  assert.equal(attachmentContentType('archive.tar.gz'), 'application/x-gzip');
  assert.equal(attachmentContentType('README'), 'application/octet-stream');
  assert.equal(attachmentContentType('c'), 'text/plain');
  assert.equal(attachmentContentType('x.unknownext'), 'application/octet-stream');
  assert.equal(attachmentContentType('a.txt', 'Text/CSV'), 'text/csv');
  assert.equal(attachmentContentType('a.txt', null), 'text/plain');
});

test('file names are made safe to show and save', () => {
  assert.equal(sanitizeFilename('../../etc/passwd'), 'passwd');
  assert.equal(sanitizeFilename('C:\\Users\\ada\\report.pdf'), 'report.pdf');
  assert.equal(sanitizeFilename('in"voice\u0000\n.pdf'), 'invoice.pdf');
  assert.equal(sanitizeFilename('.hidden'), 'hidden');
  assert.equal(sanitizeFilename('...'), '');
  assert.equal(sanitizeFilename('a'.repeat(300)).length, 255);
});
