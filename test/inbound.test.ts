import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { runCli } from '../src/cli.ts';
import { loadConfig } from '../src/config.ts';
import { createSecretBox } from '../src/lib/crypto.ts';
import { newId } from '../src/lib/ids.ts';
import { createReturnPath } from '../src/modules/emails/return-path.ts';
import { EVENT_KIND_NAMES } from '../src/modules/event-kinds/event-kinds.ts';
import { type RunningServer, startServer } from '../src/server.ts';
import { ALL_ENGINES, engineSkip } from './helpers/app.ts';
import { createProcessDatabase, type ProcessDatabase, requestJson } from './helpers/process.ts';
import { checkWebhookPayloads } from './helpers/contract.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';
import {
  buildArf,
  buildAutoReply,
  buildDsn,
  dsnOn,
  idleConnection,
  mailReport,
  reporterKey,
  signReport,
} from './helpers/reports.ts';
import { type ReceivedMessage, startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';
import { until } from './helpers/until.ts';

// After a message leaves: a relay (smtp-server) accepts it and later mails a report back to its return path,
// at Postwire's own inbound SMTP listener, as a real MTA does. The whole server runs as `postwire serve` does
// (startServer): API, workers and listener, configured from the environment.

const KEY = 'pw_inbound_test_key_0123456789';
const ENCRYPTION_KEY = Buffer.alloc(32, 9);
const BOUNCE_DOMAIN = 'bounces.example.test';
const returnPath = createReturnPath({ domain: BOUNCE_DOMAIN, secretBox: createSecretBox(ENCRYPTION_KEY) });
/** A feedback loop the operator trusts for example.org, and the recipients' own provider, with their keys. */
const FEEDBACK_LOOP = reporterKey('mail.example.net');
const PROVIDER = reporterKey('example.org', 'mx2026');

for (const engine of ALL_ENGINES) {
  describe(`inbound reports (${engine})`, { skip: engineSkip(engine) }, () => {
    let database: ProcessDatabase;
    let relay: TestSmtpServer;
    let receiver: Receiver;
    let server: RunningServer;
    let inboundPort: number;
    let dns: TestDnsServer;

    const api = (method: string, path: string, body?: unknown, key = KEY) =>
      requestJson(`${server.url}${path}`, key, method, body);

    const send = async (to: string, key = KEY): Promise<string> => {
      const response = await api(
        'POST',
        '/v1/emails',
        { from: 'Shop <shop@example.com>', to: [to], subject: 'Your order', text: 'Thanks' },
        key,
      );
      assert.equal(response.status, 202, JSON.stringify(response.body));
      return response.body.id;
    };

    /** The message the relay received for an email (its Message-ID is `<email id@domain>`). */
    const relayed = (emailId: string): Promise<ReceivedMessage> =>
      until(
        () => relay.messages.find((message) => message.messageId?.startsWith(`<${emailId}@`)),
        8000,
        `the relay to receive ${emailId}`,
      );

    const eventsOf = (emailId: string) =>
      receiver.requests
        .map((request) => JSON.parse(request.body))
        .filter((event) => event.data.email_id === emailId);

    const waitForEvent = (emailId: string, type: string) =>
      until(() => eventsOf(emailId).find((event) => event.type === type), 8000, `${type} for ${emailId}`);

    /** Sends an email through the relay and waits until it is `sent` (the relay's 250 recorded). */
    const sendAndRelay = async (to: string) => {
      const id = await send(to);
      const message = await relayed(id);
      await waitForEvent(id, 'email.sent');
      return { id, message };
    };

    /** Mails a report to the listener; resolves to the stored message's row once it has been read. */
    const report = async (to: string, raw: string | Buffer) => {
      const reply = await mailReport(inboundPort, to, raw);
      const stored = /queued as (inb_[0-9a-z]+)/.exec(reply)?.[1];
      assert.ok(stored, `the listener's 250 names the stored message: ${reply}`);
      return until(
        async () => {
          const row = await database.database.handle.db
            .selectFrom('inbound_messages')
            .selectAll()
            .where('id', '=', stored)
            .executeTakeFirst();
          return row && row.status !== 'pending' ? row : undefined;
        },
        8000,
        `inbound message ${stored} to be read`,
      );
    };

    const recipientStatus = async (emailId: string) =>
      (await api('GET', `/v1/emails/${emailId}`)).body.recipients[0].status;

    before(async () => {
      database = await createProcessDatabase(engine);
      dns = await startDnsServer();
      for (const key of [FEEDBACK_LOOP, PROVIDER]) {
        dns.add(`${key.selector}._domainkey.${key.domain}`, { type: 'TXT', text: key.txt });
      }
      relay = await startSmtpServer({ dsn: true });
      receiver = await startReceiver();
      const config = loadConfig({
        ...database.env,
        PORT: '0',
        POSTWIRE_BOOTSTRAP_KEY: KEY,
        POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY.toString('hex'),
        POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
        SMTP_URL: `smtp://127.0.0.1:${relay.port}`,
        BOUNCE_DOMAIN,
        DNS_SERVERS: dns.address,
        REPORT_FEEDBACK_LOOPS: `${FEEDBACK_LOOP.domain}=example.org`,
        INBOUND_SMTP_PORT: '0',
        INBOUND_MAX_BYTES: String(1024 * 1024),
        // Every connection of this suite comes from 127.0.0.1, the 1,000 idle ones below included, which stand
        // for many clients: the per-address limit (test/inbound-listener.test.ts) would refuse them.
        INBOUND_MAX_CONNECTIONS_PER_CLIENT: '5000',
        // Each of them begins a message (MAIL FROM): as many clients, not one past its rate.
        INBOUND_MESSAGES_PER_MINUTE: '100000',
        PUBLIC_URL: 'https://mail.example.test',
        LOG_LEVEL: 'silent',
      });
      server = await startServer(config, { worker: true, stdout: { write() {} } });
      inboundPort = server.inboundPort!;
      const webhook = await api('POST', '/v1/webhooks', { url: receiver.url, events: EVENT_KIND_NAMES });
      assert.equal(webhook.status, 201);
    });

    after(async () => {
      // Every event the reports caused, as the receiver got it, is what the document's webhooks section says.
      const doc = (await api('GET', '/v1/openapi.json')).body;
      const problems = checkWebhookPayloads(
        doc,
        receiver.requests.map((request) => request.body),
      );
      await server?.close();
      await receiver?.close();
      await relay?.close();
      await dns?.close();
      await database?.cleanup();
      assert.ok(receiver.requests.length > 0, 'no event reached the receiver');
      assert.deepEqual(problems, [], 'webhook payloads that break the document');
    });

    test('a hard bounce after the relay accepted: email.bounced, suppressed, and the next send never leaves', async () => {
      const { id, message } = await sendAndRelay('Nobody@Example.org');
      assert.match(message.from, /^bounce\+[0-9a-z]{36}@bounces\.example\.test$/);
      assert.ok(returnPath.recipientOf(message.from), 'a return path signed with the server key');
      assert.deepEqual(message.dsn, {
        ret: 'HDRS',
        envid: id,
        recipients: [{ notify: ['SUCCESS', 'FAILURE', 'DELAY'], orcpt: 'rfc822;Nobody@example.org' }],
      });

      const row = await report(
        message.from,
        dsnOn(message, {
          action: 'failed',
          recipient: 'nobody@example.org',
          status: '5.1.1',
          diagnostic: '550 5.1.1 <nobody@example.org>: Recipient address rejected: User unknown',
          envelopeId: id,
        }),
      );
      assert.equal(row.status, 'applied', row.detail ?? '');

      const bounced = await waitForEvent(id, 'email.bounced');
      assert.deepEqual(bounced.data.bounce, {
        type: 'hard',
        status: '5.1.1',
        diagnostic: '550 5.1.1 <nobody@example.org>: Recipient address rejected: User unknown',
        reporting_mta: 'relay.example.net',
      });
      assert.equal(bounced.data.recipient, 'Nobody@example.org', 'as stored: the domain lowercased');
      assert.equal(bounced.data.inbound_message_id, row.id);
      assert.equal(await recipientStatus(id), 'bounced');

      const suppression = await api('GET', '/v1/suppressions/nobody@example.org');
      assert.equal(suppression.status, 200);
      assert.equal(suppression.body.reason, 'hard_bounce');
      assert.equal(suppression.body.email_id, id);

      const listed = await api('GET', '/v1/inbound-messages');
      assert.equal(listed.status, 200);
      const entry = listed.body.data.find((item: { id: string }) => item.id === row.id);
      assert.equal(entry.status, 'applied');
      assert.equal(entry.kind, 'delivery_status');
      assert.equal(entry.email_id, id);
      assert.equal(entry.subject, 'Undelivered Mail Returned to Sender');
      assert.deepEqual((await api('GET', `/v1/inbound-messages/${row.id}`)).body, entry);

      const again = await send('nobody@example.org');
      const suppressed = await waitForEvent(again, 'email.suppressed');
      assert.equal(suppressed.data.recipient, 'nobody@example.org');
      assert.equal(await recipientStatus(again), 'suppressed');
      assert.ok(
        !relay.messages.some((received) => received.messageId?.startsWith(`<${again}@`)),
        'the suppressed recipient never reaches the relay',
      );

      // The same report again (an MTA that retried its delivery): stored, read, nothing changes.
      const repeat = await report(
        message.from,
        dsnOn(message, {
          action: 'failed',
          recipient: 'nobody@example.org',
          status: '5.1.1',
          diagnostic: '550 5.1.1 user unknown',
        }),
      );
      assert.equal(repeat.status, 'no_change');
      assert.equal(eventsOf(id).filter((event) => event.type === 'email.bounced').length, 1);
    });

    test("a report that outruns the relay's 250 being recorded is read again, and applies", async () => {
      let stored: string | undefined;
      relay.beforeAccept(async (message) => {
        if (!message.to.includes('quick@example.org')) return;
        const reply = await mailReport(
          inboundPort,
          message.from,
          dsnOn(message, {
            action: 'failed',
            recipient: 'quick@example.org',
            status: '5.1.1',
            diagnostic: '550 5.1.1 user unknown',
          }),
        );
        stored = /queued as (inb_[0-9a-z]+)/.exec(reply)?.[1];
        // The worker read it, found the recipient still being sent and put it back for later.
        await until(
          async () => {
            const row = await database.database.handle.db
              .selectFrom('inbound_messages')
              .select(['status', 'locked_by', 'locked_until', 'attempts'])
              .where('id', '=', stored!)
              .executeTakeFirst();
            return row?.status === 'pending' && row.locked_by === null && row.attempts > 0;
          },
          8000,
          'the early report to be put back',
        );
      });
      try {
        const id = await send('quick@example.org');
        const bounced = await waitForEvent(id, 'email.bounced');
        assert.equal(bounced.data.inbound_message_id, stored);
        assert.deepEqual(
          eventsOf(id).map((event) => event.type),
          ['email.sent', 'email.bounced'],
        );
        assert.equal(await recipientStatus(id), 'bounced');
      } finally {
        relay.beforeAccept(undefined);
      }
    });

    test('a success report turns a relayed recipient into delivered', async () => {
      const { id, message } = await sendAndRelay('ada@example.org');
      assert.equal(await recipientStatus(id), 'sent');
      const row = await report(
        message.from,
        dsnOn(message, {
          action: 'delivered',
          recipient: 'ada@example.org',
          status: '2.0.0',
          diagnostic: '250 2.0.0 Ok: queued as 4711',
        }),
      );
      assert.equal(row.status, 'applied');
      const delivered = await waitForEvent(id, 'email.delivered');
      assert.deepEqual(delivered.data.delivery, {
        status: '2.0.0',
        diagnostic: '250 2.0.0 Ok: queued as 4711',
        reporting_mta: 'relay.example.net',
        remote_mta: 'mx.example.org',
      });
      assert.equal(await recipientStatus(id), 'delivered');
    });

    test('a delay report: email.delivery_delayed once per streak, then the delivery', async () => {
      const { id, message } = await sendAndRelay('slow@example.org');
      const delay = (diagnostic: string) =>
        dsnOn(message, {
          action: 'delayed',
          recipient: 'slow@example.org',
          status: '4.4.1',
          diagnostic,
        });
      assert.equal(
        (await report(message.from, delay('connect to mx.example.org: timed out'))).status,
        'applied',
      );
      const delayed = await waitForEvent(id, 'email.delivery_delayed');
      assert.equal(delayed.data.delay.status, '4.4.1');
      assert.equal(await recipientStatus(id), 'sent', 'still with the relay');

      assert.equal((await report(message.from, delay('still timing out'))).status, 'no_change');
      const success = dsnOn(message, {
        action: 'delivered',
        recipient: 'slow@example.org',
        status: '2.0.0',
        diagnostic: '250 ok',
      });
      assert.equal((await report(message.from, success)).status, 'applied');
      await waitForEvent(id, 'email.delivered');
      assert.deepEqual(
        eventsOf(id).map((event) => event.type),
        ['email.sent', 'email.delivery_delayed', 'email.delivered'],
      );
    });

    test('a complaint (ARF) to the return path: email.complained and suppression', async () => {
      const { id, message } = await sendAndRelay('grumpy@example.org');
      const row = await report(
        message.from,
        buildArf({
          to: message.from,
          original: message.raw,
          originalMailFrom: message.from,
          originalRcptTo: null,
        }),
      );
      assert.equal(row.status, 'applied', row.detail ?? '');
      const complained = await waitForEvent(id, 'email.complained');
      assert.deepEqual(complained.data.complaint, { feedback_type: 'abuse', user_agent: 'ExampleFBL/1.0' });
      assert.equal(await recipientStatus(id), 'complained');
      const suppression = await api('GET', '/v1/suppressions/grumpy@example.org');
      assert.equal(suppression.body.reason, 'complaint');
    });

    test('a complaint to a fixed feedback address, signed by a feedback loop that reports for the domain, applies', async () => {
      const { id, message } = await sendAndRelay('other@example.org');
      const arf = buildArf({
        to: `fbl@${BOUNCE_DOMAIN}`,
        original: message.raw,
        originalMailFrom: null,
        originalRcptTo: 'Other@Example.org',
      });
      const row = await report(`fbl@${BOUNCE_DOMAIN}`, await signReport(arf, FEEDBACK_LOOP));
      assert.equal(row.status, 'applied', row.detail ?? '');
      assert.match(row.detail ?? '', /vouched for by the feedback loop mail\.example\.net/);
      await waitForEvent(id, 'email.complained');
    });

    test('a report by Message-ID that no provider of the recipient signed changes nothing: unverified, shown to its project', async () => {
      const { id, message } = await sendAndRelay('calm@example.org');
      const arf = buildArf({
        to: `fbl@${BOUNCE_DOMAIN}`,
        original: message.raw,
        originalMailFrom: null,
        originalRcptTo: 'calm@example.org',
      });
      // Unsigned; then signed by a key whose record says otherwise (a signature that does not verify).
      const forged = await signReport(arf, {
        ...reporterKey(FEEDBACK_LOOP.domain),
        selector: FEEDBACK_LOOP.selector,
      });
      for (const raw of [arf, forged]) {
        const row = await report(`fbl@${BOUNCE_DOMAIN}`, raw);
        assert.equal(row.status, 'unverified', row.detail ?? '');
        assert.match(row.detail ?? '', /calm@example\.org by the Message-ID .* no valid DKIM signature/);
        const shown = await api('GET', `/v1/inbound-messages/${row.id}`);
        assert.equal(shown.status, 200, 'its project sees it');
        assert.equal(shown.body.status, 'unverified');
      }
      assert.equal(await recipientStatus(id), 'sent');
      assert.equal((await api('GET', '/v1/suppressions/calm@example.org')).status, 404);
    });

    test('a recipient cannot bounce or complain about a co-recipient, even signed by their shared provider', async () => {
      const sent = await api('POST', '/v1/emails', {
        from: 'Shop <shop@example.com>',
        to: ['alice@example.org'],
        cc: ['bob@example.org'],
        subject: 'Team update',
        text: 'Hello both',
      });
      assert.equal(sent.status, 202, JSON.stringify(sent.body));
      const id = sent.body.id;
      const aliceCopy = await until(
        () =>
          relay.messages.find((m) => m.messageId?.startsWith(`<${id}@`) && m.to[0] === 'alice@example.org'),
        8000,
        "alice's copy",
      );
      await until(
        async () =>
          (await api('GET', `/v1/emails/${id}`)).body.recipients.every((r: any) => r.status === 'sent'),
        8000,
        'both sent',
      );
      const bobStatus = async () =>
        (await api('GET', `/v1/emails/${id}`)).body.recipients.find(
          (r: any) => r.address === 'bob@example.org',
        ).status;

      // Alice knows the Message-ID: a bounce for Bob to the postmaster, unsigned and signed as her own mail.
      const dsn = buildDsn({
        to: `postmaster@${BOUNCE_DOMAIN}`,
        action: 'failed',
        recipient: 'bob@example.org',
        status: '5.1.1',
        diagnostic: '550 5.1.1 user unknown',
        original: aliceCopy.raw,
        reportingMta: 'example.org',
      }).replace(/^From: .*$/m, 'From: <alice@example.org>');
      const complaint = buildArf({
        to: `fbl@${BOUNCE_DOMAIN}`,
        original: aliceCopy.raw,
        originalMailFrom: null,
        originalRcptTo: 'bob@example.org',
        from: 'alice@example.org',
      });
      for (const [to, raw] of [
        [`postmaster@${BOUNCE_DOMAIN}`, dsn],
        [`postmaster@${BOUNCE_DOMAIN}`, await signReport(dsn, PROVIDER)],
        [`fbl@${BOUNCE_DOMAIN}`, await signReport(complaint, PROVIDER)],
      ] as const) {
        const row = await report(to, raw);
        assert.equal(row.status, 'unverified', row.detail ?? '');
        assert.match(row.detail ?? '', /bob@example\.org by the Message-ID/);
      }
      // Her own return path carries her token, not Bob's: a report to it can only be about her.
      const own = await report(
        aliceCopy.from,
        buildDsn({
          to: aliceCopy.from,
          action: 'failed',
          recipient: 'bob@example.org',
          status: '5.1.1',
          diagnostic: '550 5.1.1 user unknown',
          original: aliceCopy.raw,
        }),
      );
      assert.equal(own.recipient, 'alice@example.org');
      assert.equal(await bobStatus(), 'sent');
      assert.equal((await api('GET', '/v1/suppressions/bob@example.org')).status, 404);
      assert.ok(
        !eventsOf(id).some((event) => event.data.to === 'bob@example.org' && event.type !== 'email.sent'),
      );
    });

    test("a bounce signed by the recipient's provider from its postmaster applies", async () => {
      const { id, message } = await sendAndRelay('gone@example.org');
      const dsn = buildDsn({
        to: `postmaster@${BOUNCE_DOMAIN}`,
        action: 'failed',
        recipient: 'gone@example.org',
        status: '5.1.1',
        diagnostic: '550 5.1.1 user unknown',
        original: message.raw,
        reportingMta: 'example.org',
      });
      const row = await report(`postmaster@${BOUNCE_DOMAIN}`, await signReport(dsn, PROVIDER));
      assert.equal(row.status, 'applied', row.detail ?? '');
      assert.match(row.detail ?? '', /mailer-daemon@example\.org, signed by the recipient's domain/i);
      await waitForEvent(id, 'email.bounced');
    });

    test('a complaint that only replies to the message (In-Reply-To) changes nothing', async () => {
      const { id, message } = await sendAndRelay('replier@example.org');
      const reply = [
        'From: <replier@example.org>',
        `To: fbl@${BOUNCE_DOMAIN}`,
        'Subject: Re: Your order',
        `In-Reply-To: ${message.messageId}`,
        `References: ${message.messageId}`,
        '',
        'This is spam, stop it.',
        '',
      ].join('\r\n');
      const row = await report(`fbl@${BOUNCE_DOMAIN}`, await signReport(reply, PROVIDER));
      assert.notEqual(row.status, 'applied', row.detail ?? '');
      assert.equal(await recipientStatus(id), 'sent');
      assert.equal((await api('GET', '/v1/suppressions/replier@example.org')).status, 404);
    });

    test("a mail to List-Unsubscribe's mailto unsubscribes the recipient, once", async () => {
      const response = await api('POST', '/v1/emails', {
        from: 'Shop <shop@example.com>',
        to: ['leaving@example.org'],
        subject: 'News',
        text: 'Hello',
        unsubscribe: true,
      });
      assert.equal(response.status, 202, JSON.stringify(response.body));
      const id: string = response.body.id;
      const message = await relayed(id);
      const header = /^List-Unsubscribe:[ \t]*(.*(?:\r?\n[ \t].*)*)/im.exec(message.raw)?.[1] ?? '';
      const mailto = /<mailto:([^>?]+)/.exec(header)?.[1];
      assert.ok(mailto?.startsWith('unsubscribe+') && mailto.endsWith(`@${BOUNCE_DOMAIN}`), header);
      const unsubscribeMail = `From: leaving@example.org\nTo: ${mailto}\nSubject: unsubscribe\n\n`;
      const row = await report(mailto!, unsubscribeMail);
      assert.equal(row.status, 'applied', row.detail ?? '');
      assert.equal(row.kind, 'unsubscribe');
      const event = await waitForEvent(id, 'email.unsubscribed');
      assert.deepEqual(event.data.unsubscribe, { method: 'mailto' });
      assert.equal((await api('GET', '/v1/suppressions/leaving@example.org')).body.reason, 'unsubscribe');
      // Mailed again: read, and nothing more happens.
      await report(mailto!, unsubscribeMail);
      assert.equal(eventsOf(id).filter((item) => item.type === 'email.unsubscribed').length, 1);
    });

    test('an auto-reply changes nothing, and the operator sees it', async () => {
      const { id, message } = await sendAndRelay('away@example.org');
      const row = await report(message.from, buildAutoReply({ to: message.from, subject: 'Your order' }));
      assert.equal(row.status, 'ignored');
      assert.equal(row.project_id, null);
      assert.equal(await recipientStatus(id), 'sent');
      assert.deepEqual(
        eventsOf(id).map((event) => event.type),
        ['email.sent'],
      );

      const output: string[] = [];
      const code = await runCli(['inbound', 'list', '--json'], {
        stdout: { write: (text: string) => output.push(text) },
        stderr: { write: (text: string) => output.push(text) },
        env: { ...database.env, POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY.toString('hex') },
      });
      assert.equal(code, 0, output.join(''));
      const listed = (
        JSON.parse(output.join('')) as Array<{ id: string; status: string; detail: string }>
      ).find((entry) => entry.id === row.id);
      assert.equal(listed?.status, 'ignored');
      assert.match(listed!.detail, /auto-reply/);
    });

    test('a forged return path changes nothing', async () => {
      const { id, message } = await sendAndRelay('victim@example.org');
      // The real return path with its tag altered, and a made-up recipient id with a guessed tag.
      const local = message.from.split('@')[0]!;
      const altered = `${local.slice(0, -1)}${local.endsWith('0') ? '1' : '0'}@${BOUNCE_DOMAIN}`;
      const invented = `bounce+${newId('rcpt').slice(5)}0123456789@${BOUNCE_DOMAIN}`;
      for (const to of [altered, invented]) {
        const row = await report(
          to,
          buildDsn({
            to,
            action: 'failed',
            recipient: 'victim@example.org',
            status: '5.1.1',
            diagnostic: '550 5.1.1 user unknown',
            original: message.raw,
            envelopeId: id,
          }),
        );
        assert.equal(row.status, 'unmatched', to);
        assert.match(row.detail ?? '', /does not verify/);
      }
      assert.equal(await recipientStatus(id), 'sent');
      assert.equal((await api('GET', '/v1/suppressions/victim@example.org')).status, 404);
      assert.deepEqual(
        eventsOf(id).map((event) => event.type),
        ['email.sent'],
      );
    });

    test("a report naming another project's message changes nothing there, and neither project sees it", async () => {
      const other = await runCli(['projects', 'create', 'Other'], {
        stdout: { write: () => true },
        stderr: { write: () => true },
        env: database.env,
      });
      assert.equal(other, 0);
      const projects = await database.database.handle.db
        .selectFrom('projects')
        .select('id')
        .where('name', '=', 'Other')
        .execute();
      const output: string[] = [];
      await runCli(['keys', 'create', '--project', projects[0]!.id], {
        stdout: { write: (text: string) => output.push(text) },
        stderr: { write: () => true },
        env: database.env,
      });
      const otherKey = output.join('').trim().split('\n').at(-1)!;
      const theirs = await send('target@example.org', otherKey);
      const theirMessage = await relayed(theirs);
      const theirStatus = async () =>
        (await api('GET', `/v1/emails/${theirs}`, undefined, otherKey)).body.recipients[0].status;
      await until(async () => (await theirStatus()) === 'sent', 8000, 'their email to be sent');
      const { id: ours, message: ourMessage } = await sendAndRelay('mine@example.org');

      // Our return path, but the returned headers are of their message.
      const row = await report(
        ourMessage.from,
        buildDsn({
          to: ourMessage.from,
          action: 'failed',
          recipient: 'target@example.org',
          status: '5.1.1',
          diagnostic: '550 5.1.1 user unknown',
          original: theirMessage.raw,
        }),
      );
      assert.equal(row.status, 'unmatched');
      assert.match(row.detail ?? '', /not the one its return path was made for/);
      assert.equal(await theirStatus(), 'sent');
      assert.equal(await recipientStatus(ours), 'sent');
      assert.equal((await api('GET', `/v1/inbound-messages/${row.id}`)).status, 404);
      assert.equal((await api('GET', `/v1/inbound-messages/${row.id}`, undefined, otherKey)).status, 404);
    });

    test('mail for any other domain is refused; oversized mail is refused and not stored', async () => {
      await assert.rejects(
        mailReport(inboundPort, 'someone@example.org', 'Subject: hi\n\nhello\n'),
        (error: any) => {
          assert.equal(error.responseCode, 550);
          return true;
        },
      );
      const before = await countInbound();
      const huge = Buffer.alloc(20 * 1024 * 1024, 'a');
      await assert.rejects(mailReport(inboundPort, `x@${BOUNCE_DOMAIN}`, huge), (error: any) => {
        assert.equal(error.responseCode, 552);
        return true;
      });
      assert.equal(await countInbound(), before, 'nothing stored');
      // The listener still takes the next report.
      const row = await report(
        `x@${BOUNCE_DOMAIN}`,
        buildAutoReply({ to: `x@${BOUNCE_DOMAIN}`, subject: 'a' }),
      );
      assert.equal(row.status, 'ignored');
    });

    test('garbage is stored, read as unreadable, and shown to the operator with why', async () => {
      for (const garbage of [
        Buffer.from([0, 1, 2, 255, 254, 10, 13, 10, 0x80, 0x81]),
        'Content-Type: multipart/report; report-type=delivery-status; boundary="\n\n--\n--\n',
        'no header at all',
      ]) {
        const row = await report(`postmaster@${BOUNCE_DOMAIN}`, garbage);
        assert.equal(row.status, 'unreadable');
        assert.ok(row.detail, 'says why');
      }
    });

    test('1,000 connections that never send DATA do not block a report', async () => {
      const idle = [];
      for (let batch = 0; batch < 10; batch++) {
        idle.push(...(await Promise.all(Array.from({ length: 100 }, () => idleConnection(inboundPort)))));
      }
      try {
        const { id, message } = await sendAndRelay('busy@example.org');
        const row = await report(
          message.from,
          dsnOn(message, {
            action: 'delivered',
            recipient: 'busy@example.org',
            status: '2.0.0',
            diagnostic: '250 ok',
          }),
        );
        assert.equal(row.status, 'applied');
        await waitForEvent(id, 'email.delivered');
      } finally {
        for (const socket of idle) socket.destroy();
      }
    });

    async function countInbound(): Promise<number> {
      const row = await database.database.handle.db
        .selectFrom('inbound_messages')
        .select((eb) => eb.fn.countAll<number>().as('count'))
        .executeTakeFirstOrThrow();
      return Number(row.count);
    }
  });
}
