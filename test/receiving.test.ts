import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import nodemailer from 'nodemailer';
import { simpleParser } from 'mailparser';
import { Webhook } from 'standardwebhooks';
import { runCli } from '../src/cli.ts';
import { loadConfig } from '../src/config.ts';
import { type RunningServer, startServer } from '../src/server.ts';
import { ALL_ENGINES, engineSkip } from './helpers/app.ts';
import { checkWebhookPayloads } from './helpers/contract.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';
import { postfixAvailable, startPostfix, type TestPostfix } from './helpers/postfix.ts';
import { createProcessDatabase, type ProcessDatabase, requestJson } from './helpers/process.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { reporterKey } from './helpers/reports.ts';
import { depthBomb, headerBytesBomb, partsBomb, sendRawMessage } from './helpers/bombs.ts';
import { spamdAvailable, startSpamd, type TestSpamd } from './helpers/spamd.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';
import { until } from './helpers/until.ts';

// Receiving email end to end: a project's domain receives (its MX verified through a real DNS server), its
// routes take mail at the listener, and what arrives is stored, parsed, authenticated, threaded to what was
// sent, and POSTed as `email.received` to a webhook, signed. The mail comes as it does from the internet: a
// real Postfix, the sender's own mail server, relays it to the listener as to a remote MX; the hostile cases
// talk SMTP directly.

const KEY = 'pw_receiving_test_key_0123456789';
const ENCRYPTION_KEY = Buffer.alloc(32, 11);
const SECRET = 'whsec_' + Buffer.alloc(24, 5).toString('base64');
const MX_HOST = 'mx.postwire.test';
const DOMAIN = 'acme.test';
/** The domain of the people who write in: its DKIM key, SPF for 127.0.0.1 and a DMARC policy are published. */
const SENDER = reporterKey('customer.example', 'mail2026');

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

/** A message as a person writes it: several lines, Unicode, html and text, an attachment and an inline image. */
const PHOTO = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==',
  'base64',
);
const INVOICE = Buffer.from(Array.from({ length: 3000 }, (_, i) => (i * 7) % 256));

function letter(options: { to: string; subject: string; inReplyTo?: string; signed?: boolean }) {
  return {
    from: 'Zoë Customer <zoe@customer.example>',
    to: options.to,
    cc: 'Copied Person <copied@customer.example>',
    replyTo: 'replies@customer.example',
    subject: options.subject,
    ...(options.inReplyTo ? { inReplyTo: options.inReplyTo, references: [options.inReplyTo] } : {}),
    text:
      'Hello,\n\nthe order arrived — thank you! Ünïcödé survives.\r\nA second paragraph, with a line long enough ' +
      'to be folded by anyone who folds lines at seventy-eight characters, which this one is well past.\n\n' +
      'On Tue, 24 Nov 2026 at 10:00, Acme <orders@acme.test> wrote:\n> Your order has shipped.\n> Track it here.\n',
    html: '<p>Hello,</p><p>the order arrived — <b>thank you</b>!</p><img src="cid:photo@customer">',
    attachments: [
      { filename: 'invoice 2026 – ünï.pdf', content: INVOICE, contentType: 'application/pdf' },
      { filename: 'photo.png', content: PHOTO, contentType: 'image/png', cid: 'photo@customer' },
    ],
    ...(options.signed === false
      ? {}
      : { dkim: { domainName: SENDER.domain, keySelector: SENDER.selector, privateKey: SENDER.privateKey } }),
  };
}

for (const engine of ALL_ENGINES) {
  describe(`receiving email (${engine})`, { skip: engineSkip(engine) }, () => {
    let database: ProcessDatabase;
    let dns: TestDnsServer;
    let relay: TestSmtpServer;
    let receiver: Receiver;
    let server: RunningServer;
    let postfix: TestPostfix | undefined;
    let listenerPort: number;
    let otherKey: string;
    const routes: Record<string, string> = {};

    const api = (method: string, path: string, body?: unknown, key = KEY) =>
      requestJson(`${server.url}${path}`, key, method, body);

    /** Talks SMTP straight to the listener, as any client on the internet may. */
    const direct = () =>
      nodemailer.createTransport({
        host: '127.0.0.1',
        port: listenerPort,
        secure: false,
        ignoreTLS: true,
        name: 'client.customer.example',
      });

    const receivedEvents = () =>
      receiver.requests
        .map((request) => ({ request, event: JSON.parse(request.body) }))
        .filter(({ event }) => event.type === 'email.received');

    const waitForReceived = (recipient: string, subject: string) =>
      until(
        () =>
          receivedEvents().find(
            ({ event }) => event.data.recipient === recipient && event.data.subject === subject,
          ),
        20_000,
        `email.received for ${recipient}: ${subject}`,
      );

    before(async () => {
      database = await createProcessDatabase(engine);
      dns = await startDnsServer();
      dns.add(`${SENDER.selector}._domainkey.${SENDER.domain}`, { type: 'TXT', text: SENDER.txt });
      dns.add(SENDER.domain, { type: 'TXT', text: 'v=spf1 ip4:127.0.0.1 -all' });
      dns.add(`_dmarc.${SENDER.domain}`, { type: 'TXT', text: 'v=DMARC1; p=reject' });
      relay = await startSmtpServer();
      receiver = await startReceiver();
      const config = loadConfig({
        ...database.env,
        PORT: '0',
        POSTWIRE_BOOTSTRAP_KEY: KEY,
        POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY.toString('hex'),
        POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
        SMTP_URL: `smtp://127.0.0.1:${relay.port}`,
        INBOUND_MX_HOST: MX_HOST,
        DNS_SERVERS: dns.address,
        INBOUND_SMTP_PORT: '0',
        INBOUND_MAX_BYTES: String(2 * 1024 * 1024),
        MAIL_HOSTNAME: MX_HOST,
        LOG_LEVEL: 'silent',
      });
      server = await startServer(config, { worker: true, stdout: { write() {} } });
      listenerPort = server.inboundPort!;

      const webhook = await api('POST', '/v1/webhooks', {
        url: receiver.url,
        events: ['email.received', 'domain.verified'],
        secret: SECRET,
      });
      assert.equal(webhook.status, 201);

      // The domain: added with receiving on, its DKIM and MX published, verified.
      const created = await api('POST', '/v1/domains', { name: DOMAIN, receiving: true });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      assert.equal(created.body.receiving, true);
      assert.equal(created.body.receiving_verified, false);
      for (const record of created.body.records as Array<{ type: string; name: string; value: string }>) {
        if (record.type === 'MX') dns.add(record.name, { type: 'MX', exchange: record.value, priority: 10 });
        else if (record.name.includes('_domainkey'))
          dns.add(record.name, { type: 'TXT', text: record.value });
      }
      assert.ok(
        created.body.records.some(
          (record: { purpose: string; type: string; name: string; value: string }) =>
            record.purpose === 'receiving' &&
            record.type === 'MX' &&
            record.name === DOMAIN &&
            record.value === MX_HOST,
        ),
        JSON.stringify(created.body.records),
      );
      const verified = await api('POST', `/v1/domains/${created.body.id}/verify`);
      assert.equal(verified.status, 200);
      assert.equal(verified.body.status, 'verified');
      assert.equal(verified.body.receiving_verified, true);

      for (const [name, body] of Object.entries({
        support: { match: `support@${DOMAIN}`, action: 'webhook', priority: 10 },
        replies: { match: `reply-*@${DOMAIN}`, action: 'webhook', priority: 20 },
        archive: { match: `archive@${DOMAIN}`, action: 'store', priority: 30 },
        closed: {
          match: `closed@${DOMAIN}`,
          action: 'reject',
          reject_message: 'This mailbox is closed',
          priority: 40,
        },
        disabled: { match: `old@${DOMAIN}`, action: 'webhook', enabled: false },
      })) {
        const route = await api('POST', '/v1/inbound-routes', body);
        assert.equal(route.status, 201, JSON.stringify(route.body));
        routes[name] = route.body.id;
      }

      // A second project, which adds the same domain name (never verified) and routes it to itself.
      const io = (output: string[]) => ({
        stdout: { write: (text: string) => output.push(text) },
        stderr: { write: (text: string) => output.push(text) },
        env: { ...database.env, POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY.toString('hex') },
      });
      assert.equal(await runCli(['projects', 'create', 'Squatter'], io([])), 0);
      const projects = await database.database.handle.db
        .selectFrom('projects')
        .select('id')
        .where('name', '=', 'Squatter')
        .execute();
      const output: string[] = [];
      await runCli(['keys', 'create', '--project', projects[0]!.id], io(output));
      otherKey = output.join('').trim().split('\n').at(-1)!;
    });

    after(async () => {
      const doc = (await api('GET', '/v1/openapi.json')).body;
      const problems = checkWebhookPayloads(
        doc,
        receiver.requests.map((request) => request.body),
      );
      await postfix?.close();
      await server?.close();
      await receiver?.close();
      await relay?.close();
      await dns?.close();
      await database?.cleanup();
      assert.deepEqual(problems, [], 'webhook payloads that break the document');
    });

    test('routes: validation, and the listing', async () => {
      const bad = async (body: unknown, param: string, code: string) => {
        const response = await api('POST', '/v1/inbound-routes', body);
        assert.equal(response.status, 422, JSON.stringify(response.body));
        assert.equal(response.body.error.param, param);
        assert.equal(response.body.error.code, code);
      };
      await bad({ match: 'nobody', action: 'store' }, 'match', 'invalid_match');
      await bad({ match: `a+b@${DOMAIN}`, action: 'store' }, 'match', 'invalid_match');
      await bad({ match: 'a@not-ours.example', action: 'store' }, 'match', 'domain_not_found');
      await bad(
        { match: `a@${DOMAIN}`, action: 'store', reject_message: 'no' },
        'reject_message',
        'parameter_invalid',
      );
      const unknown = await api('POST', '/v1/inbound-routes', { match: `a@${DOMAIN}`, action: 'forward' });
      assert.equal(unknown.status, 422);

      const listed = await api('GET', '/v1/inbound-routes');
      assert.equal(listed.status, 200);
      assert.deepEqual(listed.body.data.map((route: { match: string }) => route.match).sort(), [
        `archive@${DOMAIN}`,
        `closed@${DOMAIN}`,
        `old@${DOMAIN}`,
        `reply-*@${DOMAIN}`,
        `support@${DOMAIN}`,
      ]);
      const one = await api('GET', `/v1/inbound-routes/${routes.closed}`);
      assert.deepEqual(
        { ...one.body, created_at: undefined, updated_at: undefined },
        {
          object: 'inbound_route',
          id: routes.closed,
          match: `closed@${DOMAIN}`,
          priority: 40,
          action: 'reject',
          reject_message: 'This mailbox is closed',
          spam_reject_score: null,
          enabled: true,
          created_at: undefined,
          updated_at: undefined,
        },
      );
      // Another project sees none of them.
      assert.equal(
        (await api('GET', `/v1/inbound-routes/${routes.closed}`, undefined, otherKey)).status,
        404,
      );
      assert.equal(
        (await api('PATCH', `/v1/inbound-routes/${routes.closed}`, { priority: 1 }, otherKey)).status,
        404,
      );
      assert.equal(
        (await api('DELETE', `/v1/inbound-routes/${routes.closed}`, undefined, otherKey)).status,
        404,
      );
    });

    test('a message relayed by a real Postfix arrives as email.received, signed, with every field and exact bytes', async (t) => {
      if (!postfixAvailable()) {
        t.skip('postfix is not installed');
        return;
      }
      postfix = await startPostfix({
        domains: ['customer.example'],
        relay: { [DOMAIN]: `127.0.0.1:${listenerPort}` },
        relayFromClients: true,
      });
      const sender = nodemailer.createTransport({
        host: '127.0.0.1',
        port: postfix.port,
        secure: false,
        ignoreTLS: true,
      });
      const composed = letter({
        to: `Acme Support <support+ticket-42@${DOMAIN}>`,
        subject: 'Order 42 — arrived',
      });
      await sender.sendMail(composed);
      sender.close();

      const { request, event } = await waitForReceived(`support+ticket-42@${DOMAIN}`, 'Order 42 — arrived');
      // Signed as Standard Webhooks prescribes.
      assert.doesNotThrow(() =>
        new Webhook(SECRET).verify(request.body, request.headers as Record<string, string>),
      );
      const data = event.data;
      assert.equal(data.route_id, routes.support);
      assert.equal(data.mailbox_hash, 'ticket-42');
      assert.equal(data.status, 'received');
      assert.deepEqual(data.from, { address: 'zoe@customer.example', name: 'Zoë Customer' });
      assert.deepEqual(data.to, [{ address: `support+ticket-42@${DOMAIN}`, name: 'Acme Support' }]);
      assert.deepEqual(data.cc, [{ address: 'copied@customer.example', name: 'Copied Person' }]);
      assert.deepEqual(data.reply_to, [{ address: 'replies@customer.example', name: '' }]);
      assert.equal(data.mail_from, 'zoe@customer.example');
      assert.match(data.text, /Ünïcödé survives\.\n/);
      assert.match(data.html, /<b>thank you<\/b>/);
      assert.match(data.reply_text, /^Hello,\n\nthe order arrived/);
      assert.doesNotMatch(data.reply_text, /Your order has shipped|wrote:/);
      assert.equal(data.truncated, false);
      assert.deepEqual(
        data.attachments.map((a: Record<string, unknown>) => [
          a.index,
          a.filename,
          a.content_type,
          a.size,
          a.content_id,
          a.sha256,
        ]),
        [
          // In MIME order: nodemailer puts the inline image in the html's multipart/related, before the mixed part's file.
          [0, 'photo.png', 'image/png', PHOTO.length, 'photo@customer', sha256(PHOTO)],
          [1, 'invoice 2026 – ünï.pdf', 'application/pdf', INVOICE.length, null, sha256(INVOICE)],
        ],
      );
      assert.equal(
        JSON.stringify(data).includes(INVOICE.toString('base64').slice(0, 40)),
        false,
        'no attachment bytes',
      );
      // Authentication at receipt: signed by the From domain, sent from an address its SPF allows.
      assert.equal(data.authentication.spf.result, 'pass', JSON.stringify(data.authentication));
      assert.deepEqual(
        data.authentication.dkim.map((s: { domain: string; result: string; aligned: boolean }) => [
          s.domain,
          s.result,
          s.aligned,
        ]),
        [[SENDER.domain, 'pass', true]],
      );
      assert.equal(data.authentication.dmarc.result, 'pass');
      assert.equal(data.spam, null, 'no SPAMD_URL');

      // The API: the same email, its raw bytes (what Postfix relayed), its attachments byte for byte.
      const got = await api('GET', `/v1/received-emails/${data.received_email_id}`);
      assert.equal(got.status, 200);
      assert.equal(got.body.object, 'received_email');
      assert.equal(got.body.text, data.text);
      assert.ok(
        got.body.headers.some((header: { name: string }) => header.name.toLowerCase() === 'dkim-signature'),
      );
      const raw = await fetch(`${server.url}/v1/received-emails/${data.received_email_id}/raw`, {
        headers: { authorization: `Bearer ${KEY}` },
      });
      assert.equal(raw.status, 200);
      assert.equal(raw.headers.get('content-type'), 'message/rfc822');
      const bytes = Buffer.from(await raw.arrayBuffer());
      const parsed = await simpleParser(bytes);
      assert.equal(parsed.subject, 'Order 42 — arrived');
      assert.match(
        bytes.toString('latin1'),
        /^Received: from .*\r\n\tby mx\.receiver\.test \(Postfix\)/m,
        "Postfix's own Received line",
      );
      for (const [index, original, type] of [
        [0, PHOTO, 'image/png'],
        [1, INVOICE, 'application/pdf'],
      ] as const) {
        const file = await fetch(
          `${server.url}/v1/received-emails/${data.received_email_id}/attachments/${index}`,
          {
            headers: { authorization: `Bearer ${KEY}` },
          },
        );
        assert.equal(file.status, 200);
        assert.equal(file.headers.get('content-type'), type);
        assert.match(file.headers.get('content-disposition') ?? '', /^attachment;/);
        assert.ok(Buffer.from(await file.arrayBuffer()).equals(original));
      }
      const missing = await api('GET', `/v1/received-emails/${data.received_email_id}/attachments/2`);
      assert.equal(missing.status, 404);
      // Another project sees nothing of it.
      assert.equal(
        (await api('GET', `/v1/received-emails/${data.received_email_id}`, undefined, otherKey)).status,
        404,
      );
      assert.equal((await api('GET', '/v1/received-emails', undefined, otherKey)).body.data.length, 0);
    });

    test('a forged message (the From domain, unsigned, from an address its SPF refuses) fails DKIM, SPF and DMARC', async () => {
      // The SPF of customer.example allows 127.0.0.1 only; this one claims another host's domain in MAIL FROM.
      dns.add('forger.example', { type: 'TXT', text: 'v=spf1 ip4:192.0.2.1 -all' });
      const client = direct();
      await client.sendMail({
        ...letter({ to: `support@${DOMAIN}`, subject: 'Please pay this invoice', signed: false }),
        envelope: { from: 'billing@forger.example', to: [`support@${DOMAIN}`] },
      });
      client.close();
      const { event } = await waitForReceived(`support@${DOMAIN}`, 'Please pay this invoice');
      const auth = event.data.authentication;
      assert.equal(auth.spf.result, 'fail', JSON.stringify(auth));
      assert.deepEqual(auth.dkim, []);
      assert.equal(auth.dmarc.result, 'fail');
      assert.equal(auth.dmarc.policy, 'reject');
    });

    test('a reply to a sent email is threaded to it and to the recipient it went to', async () => {
      const sent = await api('POST', '/v1/emails', {
        from: `Acme <orders@${DOMAIN}>`,
        reply_to: `reply-order-7@${DOMAIN}`,
        to: ['zoe@customer.example'],
        subject: 'Your order has shipped',
        text: 'It is on its way.\nTrack it on our site.\n',
      });
      assert.equal(sent.status, 202, JSON.stringify(sent.body));
      const email = await until(
        async () => {
          const body = (await api('GET', `/v1/emails/${sent.body.id}`)).body;
          return body.recipients[0].status === 'sent' && body;
        },
        10_000,
        'the email to be sent',
      );
      const client = direct();
      await client.sendMail({
        ...letter({
          to: `reply-order-7@${DOMAIN}`,
          subject: 'Re: Your order has shipped',
          inReplyTo: email.message_id,
        }),
      });
      client.close();
      const { event } = await waitForReceived(`reply-order-7@${DOMAIN}`, 'Re: Your order has shipped');
      assert.equal(event.data.route_id, routes.replies);
      assert.equal(event.data.in_reply_to, email.message_id);
      assert.equal(event.data.in_reply_to_email_id, sent.body.id);
      assert.equal(event.data.in_reply_to_recipient, 'zoe@customer.example');
      const listed = await api('GET', `/v1/received-emails?route_id=${routes.replies}`);
      assert.deepEqual(
        listed.body.data.map((item: { id: string }) => item.id),
        [event.data.received_email_id],
      );
    });

    test('refused at RCPT: an unrouted address, a disabled route, a reject route, another domain; nothing stored', async () => {
      const before = await database.database.handle.db
        .selectFrom('inbound_messages')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .executeTakeFirstOrThrow();
      const refusal = async (to: string) => {
        const client = direct();
        try {
          await client.sendMail({ from: 'zoe@customer.example', to, subject: 'hi', text: 'hello\nthere\n' });
          assert.fail(`${to} was accepted`);
        } catch (error) {
          return (error as { response?: string }).response ?? String(error);
        } finally {
          client.close();
        }
      };
      assert.match(await refusal(`nobody@${DOMAIN}`), /^550 5\.1\.1/);
      assert.match(await refusal(`old@${DOMAIN}`), /^550 5\.1\.1/);
      assert.match(await refusal(`closed@${DOMAIN}`), /^550 5\.7\.1 This mailbox is closed/);
      assert.match(await refusal('someone@elsewhere.example'), /^550 5\.1\.1/, 'no open relay');
      const after = await database.database.handle.db
        .selectFrom('inbound_messages')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .executeTakeFirstOrThrow();
      assert.equal(Number(after.n), Number(before.n));
    });

    test("another project's copy of the domain never receives: only the verified holder's routes match", async () => {
      const theirs = await api('POST', '/v1/domains', { name: DOMAIN, receiving: true }, otherKey);
      assert.equal(theirs.status, 201);
      const route = await api(
        'POST',
        '/v1/inbound-routes',
        { match: `*@${DOMAIN}`, action: 'webhook', priority: 0 },
        otherKey,
      );
      assert.equal(route.status, 201, JSON.stringify(route.body));
      const client = direct();
      await assert.rejects(
        client.sendMail({
          from: 'zoe@customer.example',
          to: `stolen@${DOMAIN}`,
          subject: 'x',
          text: 'a\nb\n',
        }),
        /550 5\.1\.1/,
      );
      // Ours still routes as before, theirs never took precedence.
      await client.sendMail({ ...letter({ to: `archive@${DOMAIN}`, subject: 'For the archive' }) });
      client.close();
      const stored = await until(
        async () => {
          const list = await api('GET', `/v1/received-emails?route_id=${routes.archive}`);
          return list.body.data.find((item: { subject: string }) => item.subject === 'For the archive');
        },
        10_000,
        'the archived message',
      );
      assert.equal(stored.recipient, `archive@${DOMAIN}`);
      // A `store` route emits nothing.
      assert.equal(
        receivedEvents().some(({ event }) => event.data.subject === 'For the archive'),
        false,
      );
      assert.equal((await api('GET', '/v1/received-emails', undefined, otherKey)).body.data.length, 0);
    });

    test('hostile mail: oversize refused before storing; bombs and garbage stored whole, shown unreadable, never lost', async () => {
      const client = direct();
      await assert.rejects(
        client.sendMail({
          from: 'zoe@customer.example',
          to: `support@${DOMAIN}`,
          subject: 'Too big',
          text: 'x'.repeat(2 * 1024 * 1024 + 10),
        }),
        /552 5\.3\.4/,
      );
      client.close();
      const bombs: Array<[string, Buffer]> = [
        ['parts', partsBomb(5000)],
        ['depth', depthBomb(200)],
        ['header', headerBytesBomb(1024 * 1024)],
        // Every byte value but '.', so no line starts with a dot (sent as is, not dot-stuffed).
        [
          'garbage',
          Buffer.concat([
            Buffer.from(
              Array.from({ length: 64 * 1024 }, (_, i) => (i * 131 + 7) % 256 || 1).map((b) =>
                b === 0x2e ? 0x2f : b,
              ),
            ),
            // Ended by a line break, as the end of DATA needs; the listener keeps the bytes before the dot.
            Buffer.from('\r\n'),
          ]),
        ],
      ];
      for (const [name, raw] of bombs) {
        const reply = await sendRawMessage(listenerPort, `support+${name}@${DOMAIN}`, raw);
        assert.match(reply, /^250 /, `${name}: ${reply}`);
      }
      for (const [name, raw] of bombs) {
        const { event } = await until(
          () => receivedEvents().find(({ event }) => event.data.recipient === `support+${name}@${DOMAIN}`),
          20_000,
          `email.received for the ${name} bomb`,
        );
        if (name === 'garbage') {
          assert.ok(['received', 'unreadable'].includes(event.data.status), name);
        } else {
          assert.equal(event.data.status, 'unreadable', name);
          assert.ok(event.data.unreadable_reason, name);
        }
        // Kept whole: the raw bytes are what was sent.
        const got = await fetch(`${server.url}/v1/received-emails/${event.data.received_email_id}/raw`, {
          headers: { authorization: `Bearer ${KEY}` },
        });
        const bytes = Buffer.from(await got.arrayBuffer());
        assert.equal(bytes.length, raw.length, name);
      }
      // The API kept answering throughout.
      assert.equal((await api('GET', '/v1/inbound-routes')).status, 200);
    });

    test('receiving off: the addresses are refused from the next RCPT on', async () => {
      const domain = (await api('GET', `/v1/domains/${DOMAIN}`)).body;
      const off = await api('PATCH', `/v1/domains/${domain.id}`, { receiving: false });
      assert.equal(off.status, 200);
      assert.deepEqual([off.body.receiving, off.body.receiving_verified], [false, false]);
      const client = direct();
      await assert.rejects(
        client.sendMail({
          from: 'zoe@customer.example',
          to: `support@${DOMAIN}`,
          subject: 'x',
          text: 'a\nb\n',
        }),
        /550 5\.1\.1/,
      );
      client.close();
      const on = await api('PATCH', `/v1/domains/${domain.id}`, { receiving: true });
      assert.equal(on.status, 200);
      const verified = await api('POST', `/v1/domains/${domain.id}/verify`);
      assert.equal(verified.body.receiving_verified, true);
    });
  });
}

describe(
  'receiving email with a spam verdict (spamd)',
  { skip: !spamdAvailable() && 'spamd is not installed' },
  () => {
    let database: ProcessDatabase;
    let dns: TestDnsServer;
    let spamd: TestSpamd;
    let server: RunningServer;
    const api = (method: string, path: string, body?: unknown) =>
      requestJson(`${server.url}${path}`, KEY, method, body);
    const GTUBE = 'XJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X';

    before(async () => {
      database = await createProcessDatabase('sqlite');
      dns = await startDnsServer();
      spamd = await startSpamd();
      server = await startServer(
        loadConfig({
          ...database.env,
          PORT: '0',
          POSTWIRE_BOOTSTRAP_KEY: KEY,
          POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY.toString('hex'),
          INBOUND_MX_HOST: MX_HOST,
          DNS_SERVERS: dns.address,
          INBOUND_SMTP_PORT: '0',
          SPAMD_URL: spamd.url,
          LOG_LEVEL: 'silent',
        }),
        { worker: true, stdout: { write() {} } },
      );
      const created = await api('POST', '/v1/domains', { name: DOMAIN, receiving: true });
      for (const record of created.body.records as Array<{ type: string; name: string; value: string }>) {
        if (record.type === 'MX') dns.add(record.name, { type: 'MX', exchange: record.value, priority: 10 });
        else if (record.name.includes('_domainkey'))
          dns.add(record.name, { type: 'TXT', text: record.value });
      }
      assert.equal(
        (await api('POST', `/v1/domains/${created.body.id}/verify`)).body.receiving_verified,
        true,
      );
      for (const body of [
        { match: `strict@${DOMAIN}`, action: 'store', spam_reject_score: 5 },
        { match: `lenient@${DOMAIN}`, action: 'store' },
      ]) {
        assert.equal((await api('POST', '/v1/inbound-routes', body)).status, 201);
      }
    });

    after(async () => {
      await server?.close();
      await spamd?.close();
      await dns?.close();
      await database?.cleanup();
    });

    const mail = async (to: string, text: string) => {
      const client = nodemailer.createTransport({
        host: '127.0.0.1',
        port: server.inboundPort!,
        secure: false,
        ignoreTLS: true,
      });
      try {
        return await client.sendMail({ from: 'zoe@customer.example', to, subject: `to ${to}`, text });
      } finally {
        client.close();
      }
    };
    const stored = (recipient: string) =>
      until(
        async () => (await api('GET', `/v1/received-emails?recipient=${recipient}`)).body.data[0],
        20_000,
        `the message to ${recipient}`,
      );

    test('a route with spam_reject_score refuses spam at DATA; scored mail carries the verdict', async () => {
      await assert.rejects(mail(`strict@${DOMAIN}`, `Hello\n${GTUBE}\n`), /550 5\.7\.1/);
      await mail(
        `strict@${DOMAIN}`,
        'Hello,\nthe parcel arrived this morning.\nThanks for the quick delivery.\n',
      );
      const ham = await stored(`strict@${DOMAIN}`);
      assert.equal(ham.spam.flagged, false);
      assert.ok(ham.spam.score < ham.spam.threshold);
      await mail(`lenient@${DOMAIN}`, `Hello\n${GTUBE}\n`);
      const spam = await stored(`lenient@${DOMAIN}`);
      assert.equal(spam.spam.flagged, true);
      assert.ok(spam.spam.score >= spam.spam.threshold);
    });
  },
);
