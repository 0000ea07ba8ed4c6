import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { dkimVerify } from 'mailauth';
import { ConfigError, type DkimConfig, loadConfig } from '../src/config.ts';
import { type Clock, systemClock } from '../src/lib/clock.ts';
import { EVENT_KIND_NAMES } from '../src/modules/event-kinds/event-kinds.ts';
import {
  createSendingWorker,
  type SendingSettings,
  type SendingWorker,
} from '../src/modules/sending/sending.worker.ts';
import { createSecretBox } from '../src/lib/crypto.ts';
import { createReturnPath, type ReturnPath } from '../src/modules/emails/return-path.ts';
import { createCaptureTransport } from '../src/modules/sending/transports/capture.ts';
import { createDirectTransport, type MxRecord } from '../src/modules/sending/transports/direct.ts';
import { createTransportFromConfig } from '../src/modules/sending/transports/from-config.ts';
import type { EmailRecord } from '../src/modules/emails/emails.repo.ts';
import { createRelayTransport } from '../src/modules/sending/transports/relay.ts';
import type { MailTransport } from '../src/modules/sending/transports/transport.ts';
import {
  ALL_ENGINES,
  engineSkip,
  ENGINES,
  startTestApp,
  TEST_ENCRYPTION_KEY,
  type TestApp,
} from './helpers/app.ts';
import { checkWebhookPayloads } from './helpers/contract.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';
import { until } from './helpers/until.ts';
import { startSendingWorker } from './helpers/sending.ts';

/** Fast settings: retries 100 ms apart, no jitter, a quick poll. */
const FAST: SendingSettings = {
  schedule: [0, 100, 100, 100, 100, 100],
  jitter: 0,
  concurrency: 8,
  concurrencyPerHost: 4,
  timeoutMs: 3000,
  pollIntervalMs: 50,
  stopGraceMs: 1000,
};

// A DKIM key and the DNS TXT record that publishes it, for mailauth to verify signatures against.
const keys = generateKeyPairSync('rsa', { modulusLength: 2048 });
const DKIM: DkimConfig = {
  domain: 'example.com',
  selector: 'pw2026',
  privateKey: keys.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
};
const DKIM_TXT = `v=DKIM1; k=rsa; p=${keys.publicKey.export({ type: 'spki', format: 'der' }).toString('base64')}`;

async function verifyDkim(raw: string) {
  const result = await dkimVerify(raw, {
    resolver: async (name: string, type: string) => {
      if (type === 'TXT' && name === `${DKIM.selector}._domainkey.${DKIM.domain}`) return [[DKIM_TXT]];
      throw Object.assign(new Error(`no ${type} for ${name}`), { code: 'ENOTFOUND' });
    },
  });
  return result.results.map((entry: any) => ({
    result: entry.status.result,
    domain: entry.signingDomain,
    selector: entry.selector,
  }));
}

/** The body of a MIME part of `raw` with the given content type (7bit parts, as these tests send). */
function part(raw: string, contentType: string): string | undefined {
  const match = new RegExp(
    `Content-Type: ${contentType}[^\\r\\n]*\\r?\\n(?:[^\\r\\n]+\\r?\\n)*\\r?\\n([\\s\\S]*?)\\r?\\n--`,
    'i',
  ).exec(raw);
  return match?.[1];
}

const header = (raw: string, name: string) =>
  new RegExp(`^${name}:[ \\t]*(.*(?:\\r?\\n[ \\t].*)*)`, 'im')
    .exec(raw.split(/\r?\n\r?\n/, 1)[0]!)?.[1]
    ?.replace(/\r?\n[ \t]+/g, ' ');

interface Harness {
  api: TestApp;
  receiver: Receiver;
  worker: SendingWorker;
  /** The webhook events received for an email, in arrival order. */
  events(emailId: string): any[];
  /** Waits until the email's webhook events include these (type@recipient) entries. */
  waitForEvents(emailId: string, expected: string[], timeoutMs?: number): Promise<any[]>;
  send(body: unknown): Promise<string>;
  close(): Promise<void>;
}

async function startHarness(
  engine: (typeof ENGINES)[number],
  transport: MailTransport,
  settings: Partial<SendingSettings> = {},
  returnPath?: ReturnPath,
  clock: Clock = systemClock,
): Promise<Harness> {
  const api = await startTestApp(engine, { allowPrivateUrls: true, worker: true, clock });
  const receiver = await startReceiver();
  const webhook = await api.request('POST', '/v1/webhooks', {
    body: { url: receiver.url, events: EVENT_KIND_NAMES },
  });
  assert.equal(webhook.status, 201, JSON.stringify(webhook.body));
  const worker = await startSendingWorker(api, {
    transport,
    clock,
    settings: { ...FAST, ...settings },
    returnPath,
  });
  const events = (emailId: string) =>
    receiver.requests
      .map((request) => JSON.parse(request.body))
      .filter((event) => event.data.email_id === emailId);
  return {
    api,
    receiver,
    worker,
    events,
    waitForEvents(emailId, expected, timeoutMs = 8000) {
      return until(
        () => {
          const seen = events(emailId).map((event) => `${event.type}@${event.data.recipient}`);
          return expected.every((entry) => seen.includes(entry)) && events(emailId);
        },
        timeoutMs,
        `events ${expected.join(', ')} for ${emailId}`,
      );
    },
    async send(body) {
      const response = await api.request('POST', '/v1/emails', { body });
      assert.equal(response.status, 202, JSON.stringify(response.body));
      return response.body.id;
    },
    async close() {
      await worker.stop();
      await receiver.close();
      // Every event these tests produced, as a receiver got it, is what the document's webhooks section says.
      const doc = (await api.request('GET', '/v1/openapi.json', { key: null })).body;
      const problems = checkWebhookPayloads(
        doc,
        receiver.requests.map((request) => request.body),
      );
      await api.close();
      assert.deepEqual(problems, [], 'webhook payloads that break the document');
    },
  };
}

// Deliveries to one endpoint run in parallel, so events may arrive out of order; their ids sort in the
// order they happened.
const kinds = (events: any[], recipient: string) =>
  events
    .filter((event) => event.data.recipient === recipient)
    .sort((a, b) => (a.id < b.id ? -1 : 1))
    .map((event) => event.type);

for (const engine of ALL_ENGINES) {
  describe(`capture transport (${engine})`, { skip: engineSkip(engine) }, () => {
    let harness: Harness;
    // The system clock, moved ahead where a test needs time to pass (a scheduled send) without waiting.
    let offsetMs = 0;
    const clock: Clock = { now: () => new Date(Date.now() + offsetMs) };
    before(async () => {
      harness = await startHarness(engine, createCaptureTransport({ dkim: DKIM }), {}, undefined, clock);
    });
    after(() => harness.close());

    test('keeps the message, and its test addresses drive every webhook event', async () => {
      const id = await harness.send({
        from: 'Shop <shop@example.com>',
        to: ['ada@example.org', 'bounced@example.test', 'delayed@example.test', 'complained@example.test'],
        subject: 'Your order',
        html: '<p>Thanks!</p>',
        tags: { kind: 'order' },
      });
      const events = await harness.waitForEvents(id, [
        'email.delivered@ada@example.org',
        'email.bounced@bounced@example.test',
        'email.delivered@delayed@example.test',
        'email.complained@complained@example.test',
      ]);
      assert.deepEqual(kinds(events, 'ada@example.org'), ['email.sent', 'email.delivered']);
      assert.deepEqual(kinds(events, 'bounced@example.test'), ['email.bounced']);
      assert.deepEqual(kinds(events, 'delayed@example.test'), [
        'email.delivery_delayed',
        'email.sent',
        'email.delivered',
      ]);
      assert.deepEqual(kinds(events, 'complained@example.test'), [
        'email.sent',
        'email.delivered',
        'email.complained',
      ]);

      const bounce = events.find((event) => event.type === 'email.bounced');
      assert.match(bounce.id, /^evt_/);
      assert.deepEqual(bounce.data, {
        email_id: id,
        from: 'Shop <shop@example.com>',
        to: ['ada@example.org', 'bounced@example.test', 'delayed@example.test', 'complained@example.test'],
        subject: 'Your order',
        message_id: bounce.data.message_id,
        tags: { kind: 'order' },
        recipient: 'bounced@example.test',
        smtp_response: bounce.data.smtp_response,
        bounce: { type: 'hard', status: '5.1.1', diagnostic: bounce.data.smtp_response, reporting_mta: null },
      });
      assert.match(bounce.data.smtp_response, /^550 5\.1\.1 /);
      assert.equal(
        bounce.data.message_id,
        (await harness.api.request('GET', `/v1/emails/${id}`)).body.message_id,
      );

      // The complaint and the hard bounce put their addresses on the project's suppression list.
      const suppressed = (await harness.api.request('GET', '/v1/suppressions')).body.data;
      assert.deepEqual(suppressed.map((entry: any) => [entry.address, entry.reason, entry.email_id]).sort(), [
        ['bounced@example.test', 'hard_bounce', id],
        ['complained@example.test', 'complaint', id],
      ]);
      await until(async () => (await harness.api.request('GET', `/v1/emails/${id}`)).body.status === 'mixed');
      const email = (await harness.api.request('GET', `/v1/emails/${id}`)).body;
      assert.deepEqual(
        email.recipients.map((recipient: any) => [recipient.address, recipient.status, recipient.attempts]),
        [
          ['ada@example.org', 'delivered', 1],
          ['bounced@example.test', 'bounced', 1],
          ['delayed@example.test', 'delivered', 2],
          ['complained@example.test', 'complained', 1],
        ],
      );
      // The email's own event list names the events the webhooks got.
      await until(async () => {
        const listed = (await harness.api.request('GET', `/v1/emails/${id}`)).body.events;
        return listed.length === 9 && listed.every((event: any) => event.id !== null);
      });
      const listed = (await harness.api.request('GET', `/v1/emails/${id}`)).body.events;
      assert.deepEqual(listed.map((event: any) => event.id).sort(), events.map((event) => event.id).sort());

      const raw = await harness.api.request('GET', `/v1/emails/${id}/raw`);
      assert.equal(raw.status, 200);
      assert.equal(raw.body.object, 'raw_email');
      assert.equal(raw.body.content_type, 'message/rfc822');
      assert.equal(header(raw.body.raw, 'Subject'), 'Your order');
      assert.equal(header(raw.body.raw, 'Message-ID'), email.message_id);
      assert.deepEqual(await verifyDkim(raw.body.raw), [
        { result: 'pass', domain: 'example.com', selector: 'pw2026' },
      ]);
    });

    test('sends a scheduled email when its time comes, not before', async () => {
      const at = new Date(clock.now().getTime() + 3_600_000).toISOString();
      const id = await harness.send({
        from: 'shop@example.com',
        to: 'later@example.org',
        subject: 'Later',
        text: 'x',
        scheduled_at: at,
      });
      assert.equal((await harness.api.request('GET', `/v1/emails/${id}`)).body.status, 'scheduled');
      // Sent before its time, its events would carry an earlier time than `at` (checked below).
      offsetMs += 3_600_000;
      const events = await harness.waitForEvents(id, ['email.delivered@later@example.org']);
      assert.ok(Date.parse(events[0].created_at) >= Date.parse(at), `${events[0].created_at} < ${at}`);
    });
  });

  describe(`relay transport (${engine})`, { skip: engineSkip(engine) }, () => {
    let smtp: TestSmtpServer;
    let harness: Harness;
    before(async () => {
      smtp = await startSmtpServer({ auth: { user: 'relay-user', pass: 's3cret:pass' } });
      const transport = createRelayTransport({
        url: `smtp://relay-user:${encodeURIComponent('s3cret:pass')}@127.0.0.1:${smtp.port}`,
        connections: 4,
        timeoutMs: 3000,
        dkim: DKIM,
      });
      harness = await startHarness(engine, transport);
    });
    after(async () => {
      await harness.close();
      await smtp.close();
    });

    test('relays a rendered template with its headers, signed, in one transaction for all recipients', async () => {
      const created = await harness.api.request('POST', '/v1/templates', {
        body: {
          name: 'Invoice',
          alias: 'invoice',
          subject: 'Invoice {{ number }} for {{ name }}',
          html: '<p>Dear {{ name }}, total: {{ total }}</p>',
          text: 'Dear {{ name }}, total: {{ total }}',
          variables: ['name', 'number', 'total'],
        },
      });
      await harness.api.request('POST', `/v1/templates/${created.body.id}/publish`, { body: {} });
      const id = await harness.send({
        from: 'Billing <billing@example.com>',
        to: ['ada@example.org'],
        cc: ['Bob <bob@example.net>'],
        bcc: ['audit@example.com'],
        reply_to: 'support@example.com',
        headers: { 'X-Entity-Ref-ID': 'inv-77', 'List-Unsubscribe': '<mailto:unsubscribe@example.com>' },
        tags: { kind: 'invoice' },
        template: { id: 'invoice', variables: { name: 'A & B', number: 77, total: '$5' } },
      });
      const [message] = await smtp.waitFor(1);
      assert.equal(message!.user, 'relay-user');
      assert.equal(message!.from, 'billing@example.com');
      assert.deepEqual(message!.to.sort(), ['ada@example.org', 'audit@example.com', 'bob@example.net']);
      const raw = message!.raw;
      assert.equal(header(raw, 'Subject'), 'Invoice 77 for A & B');
      assert.equal(header(raw, 'From'), 'Billing <billing@example.com>');
      assert.equal(header(raw, 'To'), 'ada@example.org');
      assert.equal(header(raw, 'Cc'), 'Bob <bob@example.net>');
      assert.equal(header(raw, 'Reply-To'), 'support@example.com');
      assert.equal(header(raw, 'Bcc'), undefined);
      assert.equal(header(raw, 'X-Entity-Ref-ID'), 'inv-77');
      assert.equal(header(raw, 'List-Unsubscribe'), '<mailto:unsubscribe@example.com>');
      assert.equal(part(raw, 'text/html'), '<p>Dear A &amp; B, total: $5</p>');
      assert.equal(part(raw, 'text/plain'), 'Dear A & B, total: $5');
      const email = (await harness.api.request('GET', `/v1/emails/${id}`)).body;
      assert.equal(message!.messageId, email.message_id);
      assert.deepEqual(await verifyDkim(raw), [
        { result: 'pass', domain: 'example.com', selector: 'pw2026' },
      ]);

      const events = await harness.waitForEvents(id, [
        'email.sent@ada@example.org',
        'email.sent@bob@example.net',
        'email.sent@audit@example.com',
      ]);
      // The relay took it; whether the recipients' servers do is the relay's business: no delivered yet.
      assert.ok(events.every((event) => event.type === 'email.sent'));
      const sent = events[0];
      assert.equal(sent.data.template_id, created.body.id);
      assert.equal(sent.data.template_version, 1);
      assert.equal(sent.data.subject, 'Invoice 77 for A & B');
      assert.match(sent.data.smtp_response, /^250 /);
      await until(async () => (await harness.api.request('GET', `/v1/emails/${id}`)).body.status === 'sent');
    });

    test('envelope addresses reach the relay as nodemailer would send them, plain or not', async () => {
      // Accepted addresses are plain (addresses.ts: a dot-atom local part, the domain lower-cased and
      // punycoded) and go to the pool as stored; any other envelope address takes nodemailer's own parsing
      // (src/modules/sending/transports/relay.ts, poolMessage), which lower-cases the domain.
      const before = smtp.messages.length;
      await harness.send({
        from: 'Shop <Shop.Orders+eu@example.com>',
        to: ['Grace.Hopper@Example.ORG', 'user@bücher.example'],
        subject: 'Addresses',
        text: 'Hi',
      });
      const accepted = (await smtp.waitFor(before + 1))[before]!;
      assert.equal(accepted.from, 'Shop.Orders+eu@example.com');
      // smtp-server reports a punycoded domain in its Unicode form.
      assert.deepEqual(accepted.to.sort(), ['Grace.Hopper@example.org', 'user@bücher.example']);

      const transport = createRelayTransport({
        url: `smtp://relay-user:${encodeURIComponent('s3cret:pass')}@127.0.0.1:${smtp.port}`,
        connections: 1,
        timeoutMs: 3000,
      });
      try {
        const now = new Date().toISOString();
        const email: EmailRecord = {
          id: 'msg_relay_envelope',
          projectId: 'prj_relay',
          from: 'shop@example.com',
          to: ['envelope-check@example.org'],
          cc: [],
          bcc: [],
          replyTo: [],
          subject: 'Envelope',
          html: null,
          text: 'Hi',
          headers: {},
          tags: {},
          templateId: null,
          templateVersion: null,
          messageId: '<msg_relay_envelope@example.com>',
          source: 'api',
          smtpUsername: null,
          attachments: [],
          dkimDomain: null,
          returnPathDomain: null,
          status: 'queued',
          recipientCount: 1,
          scheduledAt: null,
          createdAt: now,
          updatedAt: now,
        };
        const result = await transport.send({
          email,
          recipients: [{ address: 'envelope-check@example.org', attempts: 0 }],
          host: 'example.org',
          envelopeFrom: 'Bounces@Example.COM',
          signal: new AbortController().signal,
        });
        assert.deepEqual(result.outcomes, [
          { address: 'envelope-check@example.org', result: 'accepted', response: '250 Ok: queued' },
        ]);
        const relayed = (await smtp.waitFor(before + 2))[before + 1]!;
        assert.equal(relayed.from, 'Bounces@example.com');
        assert.deepEqual(relayed.to, ['envelope-check@example.org']);
        assert.equal(relayed.messageId, '<msg_relay_envelope@example.com>');
      } finally {
        await transport.close();
      }
    });

    test('a recipient the relay refuses with 550 bounces; the others are sent', async () => {
      smtp.onRecipient((address) =>
        address === 'nobody@example.org'
          ? { code: 550, message: '5.1.1 <nobody@example.org>: no such user' }
          : undefined,
      );
      try {
        const id = await harness.send({
          from: 'shop@example.com',
          to: ['nobody@example.org', 'somebody@example.org'],
          subject: 'Hi',
          text: 'Hi',
        });
        const events = await harness.waitForEvents(id, [
          'email.bounced@nobody@example.org',
          'email.sent@somebody@example.org',
        ]);
        const bounce = events.find((event) => event.type === 'email.bounced');
        assert.equal(bounce.data.smtp_response, '550 5.1.1 <nobody@example.org>: no such user');
        await until(
          async () => (await harness.api.request('GET', `/v1/emails/${id}`)).body.status === 'mixed',
        );
        const email = (await harness.api.request('GET', `/v1/emails/${id}`)).body;
        assert.equal(email.recipients[0].status, 'bounced');
        assert.equal(email.recipients[0].last_response, '550 5.1.1 <nobody@example.org>: no such user');
        assert.equal(email.recipients[1].status, 'sent');
      } finally {
        smtp.onRecipient(() => undefined);
      }
    });

    test('keeps a few pooled connections for many messages', async () => {
      const before = smtp.connections;
      const ids: string[] = [];
      for (let i = 0; i < 20; i += 1) {
        ids.push(
          await harness.send({
            from: 'shop@example.com',
            to: `p${i}@example.org`,
            subject: `P${i}`,
            text: 'x',
          }),
        );
      }
      await until(() => ids.every((id) => harness.events(id).some((event) => event.type === 'email.sent')));
      assert.ok(smtp.connections - before <= 4, `${smtp.connections - before} connections for 20 messages`);
    });
  });

  describe(`relay outages (${engine})`, { skip: engineSkip(engine) }, () => {
    test('a relay that is down delays the email; it is sent once the relay is back', async () => {
      const probe = await startSmtpServer();
      const port = probe.port;
      await probe.close();
      const harness = await startHarness(
        engine,
        createRelayTransport({ url: `smtp://127.0.0.1:${port}`, connections: 2, timeoutMs: 2000 }),
        { schedule: [0, 150, 150, 150, 150, 150, 150, 150, 150, 150] },
      );
      let smtp: TestSmtpServer | undefined;
      try {
        const id = await harness.send({
          from: 'shop@example.com',
          to: 'ada@example.org',
          subject: 'Later',
          text: 'x',
        });
        await harness.waitForEvents(id, ['email.delivery_delayed@ada@example.org']);
        const delayed = (await harness.api.request('GET', `/v1/emails/${id}`)).body;
        assert.equal(delayed.status, 'delayed');
        assert.match(delayed.recipients[0].last_response, /ECONNREFUSED|connect/i);
        assert.ok(delayed.recipients[0].next_attempt_at);

        smtp = await startSmtpServer({ port });
        const [message] = await smtp.waitFor(1, 8000);
        assert.equal(message!.messageId, delayed.message_id);
        const events = await harness.waitForEvents(id, ['email.sent@ada@example.org']);
        assert.deepEqual(kinds(events, 'ada@example.org'), ['email.delivery_delayed', 'email.sent']);
        const email = (await harness.api.request('GET', `/v1/emails/${id}`)).body;
        assert.ok(email.recipients[0].attempts >= 2);
      } finally {
        await harness.close();
        await smtp?.close();
      }
    });

    test('temporary refusals until the retries run out end in email.failed', async () => {
      const smtp = await startSmtpServer();
      smtp.scriptData(...Array.from({ length: 3 }, () => ({ code: 451, message: '4.7.1 Try again later' })));
      const harness = await startHarness(
        engine,
        createRelayTransport({ url: `smtp://127.0.0.1:${smtp.port}`, connections: 1, timeoutMs: 2000 }),
        { schedule: [0, 50, 50] },
      );
      try {
        const id = await harness.send({
          from: 'shop@example.com',
          to: 'ada@example.org',
          subject: 'No',
          text: 'x',
        });
        const events = await harness.waitForEvents(id, ['email.failed@ada@example.org']);
        assert.deepEqual(kinds(events, 'ada@example.org'), ['email.delivery_delayed', 'email.failed']);
        assert.equal(events.at(-1).data.smtp_response, '451 4.7.1 Try again later');
        const email = (await harness.api.request('GET', `/v1/emails/${id}`)).body;
        assert.equal(email.status, 'failed');
        assert.equal(email.recipients[0].attempts, 3);
        assert.equal(smtp.messages.length, 0);
      } finally {
        await harness.close();
        await smtp.close();
      }
    });
  });

  describe(`suppression at send time (${engine})`, { skip: engineSkip(engine) }, () => {
    let smtp: TestSmtpServer;
    let harness: Harness;
    before(async () => {
      smtp = await startSmtpServer();
      smtp.onRecipient((address) => {
        if (address.startsWith('gone'))
          return { code: 550, message: '5.1.1 <gone@example.org>: no such user' };
        if (address.startsWith('blocked')) return { code: 550, message: '5.7.1 Message rejected by policy' };
        return undefined;
      });
      harness = await startHarness(
        engine,
        createRelayTransport({ url: `smtp://127.0.0.1:${smtp.port}`, connections: 2, timeoutMs: 3000 }),
      );
    });
    after(async () => {
      await harness.close();
      await smtp.close();
    });
    const suppression = async (address: string) =>
      (await harness.api.request('GET', `/v1/suppressions/${address}`)).body;

    test('a suppressed recipient is not sent to; the others are, and an event says why', async () => {
      await harness.api.request('POST', '/v1/suppressions', {
        body: { addresses: ['Kept.Away@example.org'] },
      });
      const id = await harness.send({
        from: 'shop@example.com',
        to: ['kept.away@EXAMPLE.org', 'ada@example.org'],
        subject: 'Hi',
        text: 'Hello',
      });
      const events = await harness.waitForEvents(id, [
        'email.suppressed@kept.away@example.org',
        'email.sent@ada@example.org',
      ]);
      const suppressed = events.find((event) => event.type === 'email.suppressed');
      assert.deepEqual(suppressed.data, {
        email_id: id,
        from: 'shop@example.com',
        to: ['kept.away@example.org', 'ada@example.org'],
        subject: 'Hi',
        message_id: suppressed.data.message_id,
        tags: {},
        recipient: 'kept.away@example.org',
        suppression: {
          reason: 'manual',
          created_at: (await suppression('kept.away@example.org')).created_at,
        },
      });
      const delivered = smtp.messages.filter((message) => message.raw.includes(id));
      assert.deepEqual(
        delivered.map((message) => message.to),
        [['ada@example.org']],
        'only the other recipient reached the relay',
      );
      await until(async () => (await harness.api.request('GET', `/v1/emails/${id}`)).body.status === 'mixed');
      const email = (await harness.api.request('GET', `/v1/emails/${id}`)).body;
      assert.deepEqual(
        email.recipients.map((recipient: any) => [recipient.address, recipient.status]),
        [
          ['kept.away@example.org', 'suppressed'],
          ['ada@example.org', 'sent'],
        ],
      );
      // The email's own timeline says why the recipient was not sent to (the dashboard shows it on its card).
      assert.deepEqual(
        email.events
          .filter((event: any) => event.type === 'email.suppressed')
          .map((event: any) => [event.recipient, event.suppression_reason]),
        [['kept.away@example.org', 'manual']],
      );
    });

    test('a hard bounce suppresses the address: the next send to it never reaches the relay', async () => {
      const first = await harness.send({
        from: 'shop@example.com',
        to: 'gone@example.org',
        subject: 'A',
        text: 'A',
      });
      const [bounce] = await harness.waitForEvents(first, ['email.bounced@gone@example.org']);
      assert.deepEqual(bounce.data.bounce, {
        type: 'hard',
        status: '5.1.1',
        diagnostic: bounce.data.smtp_response,
        reporting_mta: null,
      });
      const entry = await suppression('gone@example.org');
      assert.deepEqual(
        [entry.reason, entry.email_id, entry.detail],
        ['hard_bounce', first, bounce.data.smtp_response],
      );

      const attemptsBefore = smtp.connections;
      const second = await harness.send({
        from: 'shop@example.com',
        to: 'gone@example.org',
        subject: 'B',
        text: 'B',
      });
      const [suppressed] = await harness.waitForEvents(second, ['email.suppressed@gone@example.org']);
      assert.equal(suppressed.data.suppression.reason, 'hard_bounce');
      const email = (await harness.api.request('GET', `/v1/emails/${second}`)).body;
      assert.equal(email.status, 'suppressed');
      await harness.worker.whenIdle();
      assert.equal(smtp.connections, attemptsBefore, 'no SMTP transaction for a suppressed address');
    });

    test('a policy bounce does not suppress the address', async () => {
      const id = await harness.send({
        from: 'shop@example.com',
        to: 'blocked@example.org',
        subject: 'P',
        text: 'P',
      });
      const [bounce] = await harness.waitForEvents(id, ['email.bounced@blocked@example.org']);
      assert.equal(bounce.data.bounce.type, 'policy');
      assert.equal(bounce.data.bounce.status, '5.7.1');
      const lookup = await harness.api.request('GET', '/v1/suppressions/blocked@example.org');
      assert.equal(lookup.status, 404);
    });
  });

  describe(`per-recipient return paths, BOUNCE_DOMAIN (${engine})`, { skip: engineSkip(engine) }, () => {
    let smtp: TestSmtpServer;
    let harness: Harness;
    const returnPath = createReturnPath({
      domain: 'bounces.example.test',
      secretBox: createSecretBox(TEST_ENCRYPTION_KEY),
    });
    before(async () => {
      smtp = await startSmtpServer();
      harness = await startHarness(
        engine,
        createRelayTransport({ url: `smtp://127.0.0.1:${smtp.port}`, connections: 2, timeoutMs: 3000 }),
        {},
        returnPath,
      );
    });
    after(async () => {
      await harness.close();
      await smtp.close();
    });

    test('each recipient goes in its own transaction, from a signed address that names it', async () => {
      const id = await harness.send({
        from: 'Shop <shop@example.com>',
        to: ['ada@example.org', 'bob@example.net'],
        subject: 'Hi',
        text: 'Hello',
      });
      const messages = await smtp.waitFor(2);
      const recipients = await harness.api.database.handle.db
        .selectFrom('email_recipients')
        .select(['id', 'address'])
        .where('email_id', '=', id)
        .execute();
      const idOf = new Map(recipients.map((row) => [row.address, row.id]));
      for (const message of messages.filter((m) => m.raw.includes(id))) {
        assert.equal(message.to.length, 1, 'one recipient per transaction');
        assert.match(message.from, /^bounce\+[0-9a-z]{36}@bounces\.example\.test$/);
        assert.equal(returnPath.recipientOf(message.from), idOf.get(message.to[0]!));
        assert.match(message.raw, /^From: Shop <shop@example\.com>/m, 'the From header is unchanged');
      }
      assert.equal(new Set(messages.map((m) => m.messageId)).size, 1, 'the same message to both');
    });
  });

  describe(`direct transport (${engine})`, { skip: engineSkip(engine) }, () => {
    let smtp: TestSmtpServer;
    let closedPort: number;
    let harness: Harness;
    const lookups: string[] = [];
    before(async () => {
      // The recipient's MX, offering STARTTLS with a self-signed certificate as many real ones do.
      smtp = await startSmtpServer({ starttls: true });
      const closed = await startSmtpServer();
      closedPort = closed.port;
      await closed.close();
      const resolveMx = async (domain: string): Promise<MxRecord[]> => {
        lookups.push(domain);
        if (domain === 'no-such-domain.example') {
          throw Object.assign(new Error('queryMx ENOTFOUND'), { code: 'ENOTFOUND' });
        }
        // Preference order: the lower number first; that one is down, so the next one gets the message.
        return [
          { exchange: '127.0.0.1', priority: 20, port: smtp.port },
          { exchange: '127.0.0.1', priority: 10, port: closedPort },
        ];
      };
      harness = await startHarness(
        engine,
        createDirectTransport({ timeoutMs: 3000, dkim: DKIM, resolveMx, allowPrivateTargets: true }),
      );
    });
    after(async () => {
      await harness.close();
      await smtp.close();
    });

    test('451 then 250 from the recipient MX: delayed, then sent and delivered, DKIM-signed', async () => {
      smtp.scriptData({ code: 451, message: '4.3.0 Greylisted, come back later' });
      const id = await harness.send({
        from: 'Ada <ada@example.com>',
        to: 'grace@example.org',
        subject: 'Direct',
        html: '<p>Straight to your MX</p>',
        text: 'Straight to your MX',
        headers: { 'X-Campaign': 'direct-1' },
      });
      // Each event is its own webhook delivery, so they can arrive in any order: wait for all three.
      const events = await harness.waitForEvents(id, [
        'email.delivery_delayed@grace@example.org',
        'email.sent@grace@example.org',
        'email.delivered@grace@example.org',
      ]);
      assert.deepEqual(kinds(events, 'grace@example.org'), [
        'email.delivery_delayed',
        'email.sent',
        'email.delivered',
      ]);
      assert.equal(events[0].data.smtp_response, '451 4.3.0 Greylisted, come back later');
      assert.match(events.at(-1).data.smtp_response, /^250 /);
      assert.ok(lookups.includes('example.org'));

      const message = smtp.messages.find((entry) => entry.to.includes('grace@example.org'))!;
      assert.equal(header(message.raw, 'Subject'), 'Direct');
      assert.equal(header(message.raw, 'X-Campaign'), 'direct-1');
      assert.equal(part(message.raw, 'text/html'), '<p>Straight to your MX</p>');
      assert.equal(part(message.raw, 'text/plain'), 'Straight to your MX');
      assert.deepEqual(await verifyDkim(message.raw), [
        { result: 'pass', domain: 'example.com', selector: 'pw2026' },
      ]);
      const email = (await harness.api.request('GET', `/v1/emails/${id}`)).body;
      assert.equal(message.messageId, email.message_id);
      assert.equal(email.status, 'delivered');
      assert.equal(email.recipients[0].attempts, 2);
    });

    test('550 from the recipient MX is a bounce with the server reply', async () => {
      smtp.onRecipient((address) =>
        address === 'gone@example.org'
          ? { code: 550, message: '5.1.1 gone@example.org: mailbox unavailable' }
          : undefined,
      );
      try {
        const id = await harness.send({
          from: 'ada@example.com',
          to: 'gone@example.org',
          subject: 'x',
          text: 'x',
        });
        const events = await harness.waitForEvents(id, ['email.bounced@gone@example.org']);
        assert.deepEqual(kinds(events, 'gone@example.org'), ['email.bounced']);
        assert.equal(events[0].data.smtp_response, '550 5.1.1 gone@example.org: mailbox unavailable');
      } finally {
        smtp.onRecipient(() => undefined);
      }
    });

    test('a domain that does not exist bounces without a server', async () => {
      const id = await harness.send({
        from: 'ada@example.com',
        to: 'x@no-such-domain.example',
        subject: 'x',
        text: 'x',
      });
      const events = await harness.waitForEvents(id, ['email.bounced@x@no-such-domain.example']);
      assert.match(events[0].data.error, /does not exist/);
      assert.equal(events[0].data.smtp_response, undefined);
    });
  });

  describe(`direct mode refuses private mail servers (${engine})`, { skip: engineSkip(engine) }, () => {
    test('an MX on a loopback address is not connected to unless private targets are allowed', async () => {
      const smtp = await startSmtpServer();
      const resolveMx = async (): Promise<MxRecord[]> => [
        { exchange: 'mx.internal.example', priority: 10, port: smtp.port },
        { exchange: '127.0.0.1', priority: 20, port: smtp.port },
      ];
      const lookup = async () => ['10.0.0.25'];
      const harness = await startHarness(
        engine,
        createDirectTransport({ timeoutMs: 3000, resolveMx, lookup, allowPrivateTargets: false }),
      );
      try {
        const id = await harness.send({
          from: 'ada@example.com',
          to: 'eve@target.example',
          subject: 's',
          text: 't',
        });
        const events = await harness.waitForEvents(id, ['email.delivery_delayed@eve@target.example']);
        assert.match(
          events[0].data.error,
          /mx\.internal\.example resolves to a loopback, private or link-local/,
        );
        assert.match(events[0].data.error, /127\.0\.0\.1 resolves to a loopback, private or link-local/);
        assert.equal(smtp.messages.length, 0, 'nothing reached the internal server');
      } finally {
        await harness.close();
        await smtp.close();
      }
    });
  });

  describe(`sending concurrency and fairness (${engine})`, { skip: engineSkip(engine) }, () => {
    test('bounds transactions per destination domain and overall', async () => {
      const smtp = await startSmtpServer({ dataDelayMs: 150 });
      const resolveMx = async (): Promise<MxRecord[]> => [
        { exchange: '127.0.0.1', priority: 10, port: smtp.port },
      ];
      const harness = await startHarness(
        engine,
        createDirectTransport({ timeoutMs: 3000, resolveMx, allowPrivateTargets: true }),
        {
          concurrency: 3,
          concurrencyPerHost: 2,
        },
      );
      try {
        const body = (domain: string, i: number) => ({
          from: 'ada@example.com',
          to: `u${i}@${domain}`,
          subject: 's',
          text: 't',
        });
        const batch = await harness.api.request('POST', '/v1/emails/batch', {
          body: Array.from({ length: 8 }, (_, i) => body('one.example', i)),
        });
        assert.equal(batch.status, 202);
        await smtp.waitFor(8, 10_000);
        assert.equal(smtp.concurrency.max, 2, 'one domain gets at most 2 connections at once');

        smtp.concurrency.max = 0;
        const mixed = await harness.api.request('POST', '/v1/emails/batch', {
          body: Array.from({ length: 12 }, (_, i) =>
            body(['a.example', 'b.example', 'c.example'][i % 3]!, i),
          ),
        });
        assert.equal(mixed.status, 202);
        await smtp.waitFor(20, 10_000);
        assert.equal(smtp.concurrency.max, 3, 'at most 3 transactions at once overall');
      } finally {
        await harness.close();
        await smtp.close();
      }
    });

    test("one project's backlog does not starve another project's fresh sends", async () => {
      const order: string[] = [];
      const capture = createCaptureTransport();
      const recording: MailTransport = {
        ...capture,
        async send(job) {
          order.push(job.email.projectId);
          return capture.send(job);
        },
      };
      const api = await startTestApp(engine);
      const big = await api.createProject('Big sender');
      const small = await api.createProject('Small sender');
      const mail = (i: number) => ({
        from: 'a@example.com',
        to: `r${i}@example.org`,
        subject: 's',
        text: 't',
      });
      for (let round = 0; round < 2; round += 1) {
        const response = await api.request('POST', '/v1/emails/batch', {
          body: Array.from({ length: 100 }, (_, i) => mail(i)),
          key: big.key,
        });
        assert.equal(response.status, 202);
      }
      const response = await api.request('POST', '/v1/emails/batch', {
        body: Array.from({ length: 5 }, (_, i) => mail(i)),
        key: small.key,
      });
      assert.equal(response.status, 202);

      const worker = createSendingWorker({
        database: api.database.handle,
        clock: systemClock,
        events: api.events,
        repositories: api.services.repositories,
        transport: recording,
        settings: { ...FAST, concurrency: 1 },
      });
      await worker.start();
      try {
        await until(() => order.length >= 205, 20_000, 'every email sent');
        const positions = order.flatMap((project, index) => (project === small.projectId ? [index] : []));
        assert.equal(positions.length, 5);
        // Queued behind 200 of the other project's, its five go out among the first dozen.
        assert.ok(
          positions.every((position) => position < 12),
          `small project's sends at ${positions.join(', ')}`,
        );
      } finally {
        await worker.stop();
        await api.close();
      }
    });
  });
}

describe('sending configuration', () => {
  test('captures by default, relays with SMTP_URL, delivers directly when asked', async () => {
    const capture = loadConfig({});
    assert.equal(capture.mailTransport, 'capture');
    assert.deepEqual(
      capture.sendRetrySchedule,
      [0, 60_000, 300_000, 900_000, 3_600_000, 10_800_000, 21_600_000, 43_200_000, 86_400_000, 86_400_000],
    );
    assert.equal(capture.sendConcurrency, 16);
    assert.equal(capture.sendConcurrencyPerHost, 4);
    assert.equal(capture.sendDailyLimit, 10_000);
    assert.equal(capture.dkim, undefined);

    const relay = loadConfig({ SMTP_URL: 'smtps://user:secret@smtp.example.com:465' });
    assert.equal(relay.mailTransport, 'relay');
    const transport = createTransportFromConfig(relay);
    // The start-up log line names the relay, never its credentials.
    assert.equal(transport.description, 'through the SMTP relay smtps://smtp.example.com:465');
    await transport.close();

    assert.equal(loadConfig({ MAIL_TRANSPORT: 'direct', SEND_DAILY_LIMIT: '0' }).mailTransport, 'direct');
    assert.equal(loadConfig({ MAIL_TRANSPORT: 'capture', SMTP_URL: 'smtp://h:25' }).mailTransport, 'capture');
  });

  test('refuses sending settings that cannot work, naming each', () => {
    const problems = (env: Record<string, string>) => {
      try {
        loadConfig(env);
        return '';
      } catch (error) {
        assert.ok(error instanceof ConfigError);
        return error.message;
      }
    };
    assert.match(problems({ MAIL_TRANSPORT: 'relay' }), /MAIL_TRANSPORT=relay needs SMTP_URL/);
    assert.match(
      problems({ MAIL_TRANSPORT: 'carrier-pigeon' }),
      /MAIL_TRANSPORT must be relay, direct or capture/,
    );
    const badUrl = problems({ SMTP_URL: 'http://user:hunter2@example.com' });
    assert.match(badUrl, /SMTP_URL must look like/);
    assert.doesNotMatch(badUrl, /hunter2/);
    assert.match(problems({ SEND_RETRY_SCHEDULE: '1m,5m' }), /SEND_RETRY_SCHEDULE must start with 0/);
    assert.match(problems({ SEND_CONCURRENCY: '0' }), /SEND_CONCURRENCY must be an integer/);
    assert.match(
      problems({ DKIM_DOMAIN: 'example.com' }),
      /needs all of DKIM_DOMAIN, DKIM_SELECTOR and DKIM_PRIVATE_KEY/,
    );
    const badKey = problems({
      DKIM_DOMAIN: 'example.com',
      DKIM_SELECTOR: 's1',
      DKIM_PRIVATE_KEY: '-----BEGIN PRIVATE KEY-----\\nnope',
    });
    assert.match(badKey, /does not hold a valid PEM private key/);
    assert.doesNotMatch(badKey, /nope/);
    assert.match(
      problems({ DKIM_DOMAIN: 'example.com', DKIM_SELECTOR: 's1', DKIM_PRIVATE_KEY: '/no/such/key.pem' }),
      /neither a PEM key nor a readable file/,
    );
  });

  test('reads a DKIM key given as PEM with escaped line breaks', () => {
    const escaped = DKIM.privateKey.trim().split('\n').join('\\n');
    const config = loadConfig({
      DKIM_DOMAIN: 'Example.com',
      DKIM_SELECTOR: 'pw2026',
      DKIM_PRIVATE_KEY: escaped,
    });
    assert.deepEqual(config.dkim, {
      domain: 'example.com',
      selector: 'pw2026',
      privateKey: DKIM.privateKey.trim(),
    });
  });
});
