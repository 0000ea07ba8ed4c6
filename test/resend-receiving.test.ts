import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import nodemailer from 'nodemailer';
import { Resend } from 'resend';
import { runCli } from '../src/cli.ts';
import { loadConfig } from '../src/config.ts';
import { createSecretBox } from '../src/lib/crypto.ts';
import { createDownloadLinks } from '../src/modules/resend-compat/resend-downloads.ts';
import { type RunningServer, startServer } from '../src/server.ts';
import { assertResendError as assertError, dataOf } from './helpers/answers.ts';
import { ALL_ENGINES, engineSkip } from './helpers/app.ts';
import { createProcessDatabase, type ProcessDatabase, requestJson } from './helpers/process.ts';
import { until } from './helpers/until.ts';

// Resend's SDK, unchanged, reads what Postwire received (`emails.receiving`: list, get, attachments, and the
// SDK's own `forward`, which fetches the raw message's download link and sends it on with POST /emails) and a
// sent email's files (`emails.attachments`), through signed download links that need no key.

const KEY = 'pw_resend_receiving_key_0123456789';
const ENCRYPTION_KEY = '5a'.repeat(32);
const INVOICE = Buffer.from(Array.from({ length: 3000 }, (_, i) => (i * 7) % 256));
const PHOTO = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==',
  'base64',
);

test('a download link verifies until it expires, and not once altered', () => {
  let now = Date.parse('2026-11-28T10:00:00Z');
  const links = createDownloadLinks({
    secretBox: createSecretBox(Buffer.alloc(32, 3)),
    clock: { now: () => new Date(now) },
  });
  const request = { protocol: 'https', host: 'mail.acme.test' } as Parameters<typeof links.link>[0];
  const ref = { kind: 'received-raw', projectId: 'proj_a', id: 'rcv_b', index: 0 } as const;
  const { download_url, expires_at } = links.link(request, ref);
  assert.equal(expires_at, '2026-11-28T11:00:00.000Z');
  const token = download_url.replace('https://mail.acme.test/resend/downloads?token=', '');
  assert.deepEqual(links.read(token), ref);
  const [payload, tag] = token.split('.');
  const other = Buffer.from(Buffer.from(payload!, 'base64url').toString().replace('proj_a', 'proj_c'));
  assert.throws(() => links.read(`${other.toString('base64url')}.${tag}`), /unknown or has expired/);
  now += 60 * 60 * 1000;
  assert.throws(() => links.read(token), /unknown or has expired/);
});

for (const engine of ALL_ENGINES) {
  describe(
    `the resend SDK's receiving and attachments against /resend (${engine})`,
    { skip: engineSkip(engine) },
    () => {
      let database: ProcessDatabase;
      let server: RunningServer;
      let resend: Resend;
      let receivedId: string;

      const api = (method: string, path: string, body?: unknown, key = KEY) =>
        requestJson(`${server.url}${path}`, key, method, body);
      const clientWith = async (body: Record<string, unknown>) => {
        const made = await api('POST', '/v1/api-keys', { name: 'scoped', ...body });
        assert.equal(made.status, 201, JSON.stringify(made.body));
        return new Resend(made.body.token, { baseUrl: `${server.url}/resend` });
      };
      const download = async (url: string) => {
        const response = await fetch(url);
        return {
          status: response.status,
          type: response.headers.get('content-type'),
          bytes: Buffer.from(await response.arrayBuffer()),
        };
      };

      before(async () => {
        database = await createProcessDatabase(engine);
        const config = loadConfig({
          ...database.env,
          PORT: '0',
          POSTWIRE_BOOTSTRAP_KEY: KEY,
          POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY,
          INBOUND_MX_HOST: 'mx.acme.test',
          INBOUND_SMTP_PORT: '0',
          LOG_LEVEL: 'silent',
        });
        server = await startServer(config, { worker: true, stdout: { write() {} } });
        resend = new Resend(KEY, { baseUrl: `${server.url}/resend` });

        const domain = await api('POST', '/v1/domains', { name: 'acme.test', receiving: true });
        assert.equal(domain.status, 201, JSON.stringify(domain.body));
        const verified = await api('POST', '/v1/domains/acme.test/verify');
        assert.equal(verified.body.status, 'verified', JSON.stringify(verified.body));
        const route = await api('POST', '/v1/inbound-routes', {
          match: 'support@acme.test',
          action: 'store',
        });
        assert.equal(route.status, 201, JSON.stringify(route.body));

        const transport = nodemailer.createTransport({
          host: '127.0.0.1',
          port: server.inboundPort!,
          secure: false,
          ignoreTLS: true,
        });
        await transport.sendMail({
          from: 'Zoë Customer <zoe@customer.example>',
          to: 'support@acme.test',
          cc: 'copied@customer.example',
          replyTo: 'replies@customer.example',
          subject: 'The order',
          messageId: '<order-1@customer.example>',
          text: 'It arrived, thank you.',
          html: '<p>It arrived, <b>thank you</b>.</p><img src="cid:photo@customer">',
          attachments: [
            { filename: 'invoice.pdf', content: INVOICE, contentType: 'application/pdf' },
            { filename: 'photo.png', content: PHOTO, contentType: 'image/png', cid: 'photo@customer' },
          ],
        });
        transport.close();
        let listed: any[] = [];
        await until(
          async () =>
            (listed = (await api('GET', '/v1/received-emails')).body.data).some(
              (email: { status: string }) => email.status === 'received',
            ),
          20_000,
          'the message received and read',
        );
        receivedId = listed[0].id;
      });
      after(async () => {
        await server?.close();
        await database?.cleanup();
      });

      test('receiving.list and get; the raw message and attachments through their links', async () => {
        const listed = dataOf(await resend.emails.receiving.list());
        assert.equal(listed.has_more, false);
        // In the message's order: the html's inline image, then the file.
        const attachments = [
          {
            id: '0',
            filename: 'photo.png',
            size: PHOTO.length,
            content_type: 'image/png',
            content_id: 'photo@customer',
            content_disposition: 'inline',
          },
          {
            id: '1',
            filename: 'invoice.pdf',
            size: INVOICE.length,
            content_type: 'application/pdf',
            content_id: null,
            content_disposition: 'attachment',
          },
        ];
        const item = listed.data[0]!;
        assert.deepEqual(item, {
          id: receivedId,
          to: ['support@acme.test'],
          from: 'zoe@customer.example',
          created_at: item.created_at,
          subject: 'The order',
          bcc: [],
          cc: ['copied@customer.example'],
          reply_to: ['replies@customer.example'],
          received_for: ['support@acme.test'],
          message_id: '<order-1@customer.example>',
          attachments,
        });

        const email = dataOf(await resend.emails.receiving.get(receivedId, { html_format: 'cid' }));
        const { html, text, headers, raw, ...rest } = email;
        assert.deepEqual(rest, { object: 'email', ...item });
        assert.match(html!, /<img src="cid:photo@customer">/);
        assert.equal(text!.trim(), 'It arrived, thank you.');
        assert.equal(headers!.subject, 'The order');
        assert.match(raw!.download_url, new RegExp(`^${server.url}/resend/downloads\\?token=`));
        assert.ok(Date.parse(raw!.expires_at) > Date.now());
        const rawBytes = await download(raw!.download_url);
        assert.equal(rawBytes.status, 200);
        assert.equal(rawBytes.type, 'message/rfc822');
        assert.match(rawBytes.bytes.toString(), /^Subject: The order\r$/m);

        const files = dataOf(await resend.emails.receiving.attachments.list({ emailId: receivedId }));
        assert.deepEqual(
          files.data.map(({ download_url: _url, expires_at: _expires, ...file }) => file),
          [
            {
              id: '0',
              filename: 'photo.png',
              size: PHOTO.length,
              content_type: 'image/png',
              content_disposition: 'inline',
              content_id: 'photo@customer',
            },
            {
              id: '1',
              filename: 'invoice.pdf',
              size: INVOICE.length,
              content_type: 'application/pdf',
              content_disposition: 'attachment',
            },
          ],
        );
        const invoice = dataOf(
          await resend.emails.receiving.attachments.get({ emailId: receivedId, id: '1' }),
        );
        assert.equal(invoice.object, 'attachment');
        const fetched = await download(invoice.download_url);
        assert.deepEqual([fetched.status, fetched.type], [200, 'application/pdf']);
        assert.deepEqual(fetched.bytes, INVOICE);
        assert.deepEqual((await download(files.data[0]!.download_url)).bytes, PHOTO);

        assertError(
          await resend.emails.receiving.get('rcv_01kb0000000000000000000000'),
          404,
          'not_found',
          "No received email with id 'rcv_01kb0000000000000000000000'.",
        );
        assertError(
          await resend.emails.receiving.attachments.get({ emailId: receivedId, id: '2' }),
          404,
          'not_found',
          `No attachment with id '${receivedId}/attachments/2'.`,
        );
        const altered = await fetch(`${raw!.download_url}x`);
        assert.equal(altered.status, 404);
        assert.deepEqual(await altered.json(), {
          statusCode: 404,
          name: 'not_found',
          message: 'This download link is unknown or has expired.',
        });
      });

      test('receiving.forward: passthrough and wrapped, sent through POST /emails; emails.attachments', async () => {
        const passed = dataOf(
          await resend.emails.receiving.forward({
            emailId: receivedId,
            to: 'boss@example.org',
            from: 'support@acme.test',
          }),
        );
        const forwarded = dataOf(await resend.emails.get(passed.id));
        assert.deepEqual(
          [forwarded.from, forwarded.to, forwarded.subject],
          ['support@acme.test', ['boss@example.org'], 'The order'],
        );
        assert.equal(forwarded.text?.trim(), 'It arrived, thank you.');
        const files = dataOf(await resend.emails.attachments.list({ emailId: passed.id }));
        assert.deepEqual(
          files.data.map((file) => [
            file.id,
            file.filename,
            file.size,
            file.content_type,
            file.content_disposition,
            file.content_id,
          ]),
          [
            ['0', 'photo.png', PHOTO.length, 'image/png', 'inline', 'photo@customer'],
            ['1', 'invoice.pdf', INVOICE.length, 'application/pdf', 'attachment', undefined],
          ],
        );
        const invoice = dataOf(await resend.emails.attachments.get({ emailId: passed.id, id: '1' }));
        assert.deepEqual((await download(invoice.download_url)).bytes, INVOICE);

        const wrapped = dataOf(
          await resend.emails.receiving.forward({
            emailId: receivedId,
            to: ['boss@example.org'],
            from: 'Support <support@acme.test>',
            passthrough: false,
            text: 'FYI',
          }),
        );
        const sent = dataOf(await resend.emails.get(wrapped.id));
        assert.deepEqual([sent.subject, sent.text], ['Fwd: The order', 'FYI']);
        const [eml] = dataOf(await resend.emails.attachments.list({ emailId: wrapped.id })).data;
        assert.deepEqual([eml!.filename, eml!.content_type], ['forwarded_message.eml', 'message/rfc822']);
        assert.match((await download(eml!.download_url)).bytes.toString(), /^Subject: The order\r$/m);

        assertError(
          await resend.emails.attachments.get({ emailId: wrapped.id, id: '1' }),
          404,
          'not_found',
          `No attachment with id '${wrapped.id}/attachments/1'.`,
        );
        assertError(
          await resend.emails.attachments.list({ emailId: 'msg_01kb0000000000000000000000' }),
          404,
          'not_found',
          "No email with id 'msg_01kb0000000000000000000000'.",
        );
        // The send path's rules hold: a recipient that is not an address is refused, as any send's.
        assertError(
          await resend.emails.receiving.forward({
            emailId: receivedId,
            to: 'boss at example.org',
            from: 'support@acme.test',
          }),
          422,
          'validation_error',
          'to is not of the form a@example.com.',
        );
        assertError(
          await resend.emails.receiving.forward({
            emailId: 'rcv_01kb0000000000000000000000',
            to: 'boss@example.org',
            from: 'support@acme.test',
          }),
          404,
          'not_found',
          "No received email with id 'rcv_01kb0000000000000000000000'.",
        );
      });

      test('scoped keys and other projects', async () => {
        const reader = await clientWith({ permission: 'read_only' });
        assert.equal(dataOf(await reader.emails.receiving.list()).data.length, 1);
        // read_only reads, and cannot send the forward.
        assertError(
          await reader.emails.receiving.forward({
            emailId: receivedId,
            to: 'boss@example.org',
            from: 'support@acme.test',
          }),
          403,
          'restricted_api_key',
          'This route needs a sending_access key (or a full_access key); this key is read_only.',
        );
        const sender = await clientWith({ permission: 'sending_access' });
        assertError(
          await sender.emails.receiving.get(receivedId),
          403,
          'restricted_api_key',
          'This route needs a read_only key (or a full_access key); this key is sending_access.',
        );
        // Another project (made with the CLI) sees none of it.
        const io = (output: string[]) => ({
          stdout: { write: (text: string) => output.push(text) },
          stderr: { write: (text: string) => output.push(text) },
          env: { ...database.env, POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY },
        });
        const made: string[] = [];
        assert.equal(await runCli(['projects', 'create', 'Other'], io(made)), 0, made.join(''));
        const [other] = await database.database.handle.db
          .selectFrom('projects')
          .select('id')
          .where('name', '=', 'Other')
          .execute();
        const output: string[] = [];
        assert.equal(
          await runCli(['keys', 'create', '--project', other!.id], io(output)),
          0,
          output.join(''),
        );
        const stranger = new Resend(output.join('').trim().split('\n').at(-1)!, {
          baseUrl: `${server.url}/resend`,
        });
        assert.deepEqual(dataOf(await stranger.emails.receiving.list()).data, []);
        for (const refused of [
          await stranger.emails.receiving.get(receivedId),
          await stranger.emails.receiving.attachments.list({ emailId: receivedId }),
        ]) {
          assertError(refused, 404, 'not_found', `No received email with id '${receivedId}'.`);
        }
      });
    },
  );
}
