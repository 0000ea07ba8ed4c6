import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { createSecretBox } from '../src/lib/crypto.ts';
import { createReturnPath } from '../src/modules/emails/return-path.ts';
import { EVENT_KIND_NAMES } from '../src/modules/event-kinds/event-kinds.ts';
import { type RunningServer, startServer } from '../src/server.ts';
import { ALL_ENGINES, engineSkip } from './helpers/app.ts';
import { checkWebhookPayloads } from './helpers/contract.ts';
import { postfixAvailable, startPostfix, type TestPostfix } from './helpers/postfix.ts';
import { createProcessDatabase, type ProcessDatabase, requestJson } from './helpers/process.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { until } from './helpers/until.ts';

// The reports test/inbound.test.ts mails by hand, written by a real MTA instead (issue 23: the genuine
// reports still work end to end). Postwire relays through a private Postfix that hosts receiver.test: it
// delivers Ada into her Maildir and, asked with NOTIFY=SUCCESS, reports that; it accepts mail for an unknown
// user too and bounces it after the fact, as a mail host behind a gateway does. Both reports are Postfix's
// own delivery status notifications, mailed by its smtp client to the envelope sender, the recipient's VERP
// address on BOUNCE_DOMAIN, which its transport map routes to Postwire's inbound listener.

const skip = postfixAvailable()
  ? false
  : 'needs Postfix (/usr/sbin/postfix; apt-get install -y postfix) and root to run a private instance';

const KEY = 'pw_postfix_reports_key_0123456789';
const ENCRYPTION_KEY = Buffer.alloc(32, 23);
const BOUNCE_DOMAIN = 'bounces.sender.test';
const returnPath = createReturnPath({ domain: BOUNCE_DOMAIN, secretBox: createSecretBox(ENCRYPTION_KEY) });
/** Everything below waits for mail to cross two SMTP hops and a worker: seconds at most, not minutes. */
const WAIT_MS = 15_000;

/** A received report as GET /v1/inbound-messages lists it (what this test reads of it). */
interface InboundMessage {
  id: string;
  email_id: string | null;
  recipient: string | null;
  rcpt_to: string[];
  mail_from: string;
  subject: string | null;
  kind: string;
  status: string;
  detail: string;
}

for (const engine of ALL_ENGINES) {
  describe(`reports from a real Postfix (${engine})`, { skip: engineSkip(engine) || skip }, () => {
    let database: ProcessDatabase;
    let postfix: TestPostfix;
    let receiver: Receiver;
    let server: RunningServer;

    const api = (method: string, path: string, body?: unknown) =>
      requestJson(`${server.url}${path}`, KEY, method, body);

    const events = (emailId: string) =>
      receiver.requests
        .map((request) => JSON.parse(request.body))
        .filter((event) => event.data.email_id === emailId);

    /** An event of the email for one recipient; a timeout says what Postfix did meanwhile. */
    const waitForEvent = async (emailId: string, type: string, recipient: string) => {
      try {
        return await until(
          () => events(emailId).find((event) => event.type === type && event.data.recipient === recipient),
          WAIT_MS,
          `${type} for ${recipient}`,
        );
      } catch (error) {
        throw new Error(`${(error as Error).message}; Postfix log:\n${postfix.log()}`);
      }
    };

    /** The email's recipients as the API shows them, by address. */
    const recipients = async (emailId: string): Promise<Map<string, { status: string }>> => {
      const email = await api('GET', `/v1/emails/${emailId}`);
      assert.equal(email.status, 200);
      return new Map(email.body.recipients.map((item: { address: string }) => [item.address, item]));
    };

    before(async () => {
      database = await createProcessDatabase(engine);
      receiver = await startReceiver();
      postfix = await startPostfix({ domains: ['receiver.test'], users: ['ada'] });
      const config = loadConfig({
        ...database.env,
        PORT: '0',
        POSTWIRE_BOOTSTRAP_KEY: KEY,
        POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY.toString('hex'),
        // The webhook receiver listens on 127.0.0.1.
        POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
        SMTP_URL: `smtp://127.0.0.1:${postfix.port}`,
        SMTP_DSN: 'success,failure,delay',
        MAIL_HOSTNAME: 'mta.sender.test',
        BOUNCE_DOMAIN,
        INBOUND_SMTP_PORT: '0',
        LOG_LEVEL: 'silent',
      });
      server = await startServer(config, { worker: true, stdout: { write() {} } });
      // The listener's port exists only now, after Postfix (whose port Postwire needed) was started: its
      // transport map learns it by a reload, before anything is sent.
      await postfix.setRelay({ [BOUNCE_DOMAIN]: `127.0.0.1:${server.inboundPort}` });
      const webhook = await api('POST', '/v1/webhooks', { url: receiver.url, events: EVENT_KIND_NAMES });
      assert.equal(webhook.status, 201);
    });

    after(async () => {
      const doc = server ? (await api('GET', '/v1/openapi.json')).body : undefined;
      await server?.close();
      await postfix?.close();
      await receiver?.close();
      await database?.cleanup();
      // Every event Postfix's reports caused is what the document's webhooks section says.
      if (doc && receiver) {
        const payloads = receiver.requests.map((request) => request.body);
        assert.deepEqual(checkWebhookPayloads(doc, payloads), [], 'webhook payloads that break the document');
      }
    });

    test('a bounce after acceptance and a success notice, each from Postfix to its return path, apply', async () => {
      const sent = await api('POST', '/v1/emails', {
        from: 'Shop <shop@sender.test>',
        to: ['Ada <ada@receiver.test>', 'nobody@receiver.test'],
        subject: 'Your order',
        text: 'Thanks for your order.',
      });
      assert.equal(sent.status, 202, JSON.stringify(sent.body));
      const id: string = sent.body.id;
      const rows = await database.database.handle.db
        .selectFrom('email_recipients')
        .select(['id', 'address'])
        .where('email_id', '=', id)
        .execute();
      const recipientId = new Map(rows.map((row) => [row.address, row.id]));

      // Postfix took both (250), which is all `sent` says through a relay.
      await waitForEvent(id, 'email.sent', 'ada@receiver.test');
      await waitForEvent(id, 'email.sent', 'nobody@receiver.test');

      // Ada's copy is in her Maildir, on the envelope sender of her own: the return path made for her.
      const [delivered] = await postfix.waitForMailbox('ada@receiver.test', 1, WAIT_MS);
      const adaReturnPath = /^Return-Path: <([^>]*)>$/m.exec(String(delivered))?.[1] ?? '';
      assert.match(adaReturnPath, /^bounce\+[0-9a-z]+@bounces\.sender\.test$/);
      assert.equal(returnPath.recipientOf(adaReturnPath), recipientId.get('ada@receiver.test'));

      // The unknown user: Postfix's failure report, read and applied.
      const bounced = await waitForEvent(id, 'email.bounced', 'nobody@receiver.test');
      assert.deepEqual(bounced.data.bounce, {
        type: 'hard',
        status: '5.1.1',
        diagnostic: 'unknown user: "nobody@receiver.test"',
        reporting_mta: 'mx.receiver.test',
      });
      const suppression = await api('GET', '/v1/suppressions/nobody@receiver.test');
      assert.equal(suppression.status, 200, JSON.stringify(suppression.body));
      assert.equal(suppression.body.reason, 'hard_bounce');
      assert.equal(suppression.body.email_id, id);

      // Ada: Postfix's success report (NOTIFY=SUCCESS), read and applied; she is not suppressed.
      await waitForEvent(id, 'email.delivered', 'ada@receiver.test');
      assert.equal((await api('GET', '/v1/suppressions/ada@receiver.test')).status, 404);

      const statuses = await recipients(id);
      assert.equal(statuses.get('nobody@receiver.test')?.status, 'bounced');
      assert.equal(statuses.get('ada@receiver.test')?.status, 'delivered');

      // Two reports came in, one per recipient, each to that recipient's return path, from the null sender.
      const inbound = await until(
        async () => {
          const listed = await api('GET', '/v1/inbound-messages');
          const mine = (listed.body.data as InboundMessage[]).filter((item) => item.email_id === id);
          return mine.length === 2 && mine;
        },
        WAIT_MS,
        'both reports listed',
      );
      const byRecipient = new Map(inbound.map((item) => [item.recipient, item]));
      const failure = byRecipient.get('nobody@receiver.test');
      const success = byRecipient.get('ada@receiver.test');
      assert.ok(failure, 'a report about nobody@receiver.test');
      assert.ok(success, 'a report about ada@receiver.test');
      for (const [item, subject, address] of [
        [failure, 'Undelivered Mail Returned to Sender', 'nobody@receiver.test'],
        [success, 'Successful Mail Delivery Report', 'ada@receiver.test'],
      ] as const) {
        assert.equal(item.status, 'applied', item.detail);
        assert.equal(item.kind, 'delivery_status');
        assert.equal(item.subject, subject);
        assert.equal(item.mail_from, '');
        assert.match(item.detail, /^matched by its return path/);
        const [to, ...more] = item.rcpt_to;
        assert.ok(to !== undefined && more.length === 0, `one recipient: ${item.rcpt_to.join(', ')}`);
        assert.equal(returnPath.recipientOf(to), recipientId.get(address));
      }
      assert.equal(success.rcpt_to[0], adaReturnPath);
      assert.equal(bounced.data.inbound_message_id, failure.id);

      // Postfix's smtp client handed each report to the listener, whose 250 names the stored message (the
      // log line comes after that 250, through postlogd: wait for it).
      for (const item of [failure, success]) {
        const line = await until(
          () =>
            postfix
              .log()
              .split('\n')
              .find((entry) => entry.includes(`to=<${item.rcpt_to[0]}>`) && entry.includes(item.id)),
          WAIT_MS,
          `Postfix's log of handing over ${item.id}`,
        );
        assert.match(
          line,
          new RegExp(
            `postfix/smtp\\[.* relay=127\\.0\\.0\\.1\\[127\\.0\\.0\\.1\\]:${server.inboundPort},.* status=sent \\(250 `,
          ),
        );
      }

      // Each happened once, though both reports name the same message.
      for (const type of ['email.sent', 'email.bounced', 'email.delivered']) {
        const count = (recipient: string) =>
          events(id).filter((event) => event.type === type && event.data.recipient === recipient).length;
        assert.equal(count('nobody@receiver.test'), type === 'email.delivered' ? 0 : 1, type);
        assert.equal(count('ada@receiver.test'), type === 'email.bounced' ? 0 : 1, type);
      }

      // The next send to the bounced address is suppressed and never reaches Postfix.
      const again = await api('POST', '/v1/emails', {
        from: 'shop@sender.test',
        to: ['nobody@receiver.test'],
        subject: 'Another order',
        text: 'Thanks again.',
      });
      assert.equal(again.status, 202);
      await waitForEvent(again.body.id, 'email.suppressed', 'nobody@receiver.test');
      assert.equal((await recipients(again.body.id)).get('nobody@receiver.test')?.status, 'suppressed');
      const deliveriesToNobody = postfix
        .log()
        .split('\n')
        .filter((entry) => /postfix\/virtual\[.* to=<nobody@receiver\.test>/.test(entry));
      assert.equal(deliveriesToNobody.length, 1, 'Postfix saw the bounced address once');
    });
  });
}
