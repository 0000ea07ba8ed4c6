import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Resend, type WebhookEvent, type WebhookEventPayload } from 'resend';
import { resendEventType } from '../src/modules/deliveries/resend-payload.ts';
import { EVENT_KIND_NAMES, type EventKind } from '../src/modules/event-kinds/event-kinds.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import { testEventData } from '../src/modules/webhook-operations/webhook-operations.service.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { BROWSER, onServer, parseMail } from './helpers/engagement.ts';
import { type Receiver, type ReceivedRequest, startReceiver } from './helpers/receiver.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';
import { until } from './helpers/until.ts';
import { startSendingWorker } from './helpers/sending.ts';

const PUBLIC_URL = 'https://mail.acme.test';
const from = 'Acme <shop@acme.test>';

/**
 * A webhook handler as a team moving from Resend has it: typed from the SDK's WebhookEventPayload, reading
 * the fields Resend documents for each type. What it read is returned, for the test to check.
 */
function handle(event: WebhookEventPayload): Record<string, unknown> {
  switch (event.type) {
    case 'email.sent':
    case 'email.delivered':
    case 'email.delivery_delayed':
    case 'email.complained':
    case 'email.opened': {
      const { email_id, from, to, subject } = event.data;
      return { type: event.type, at: event.created_at, email_id, from, to, subject };
    }
    case 'email.bounced': {
      const { email_id, from, to, subject, bounce } = event.data;
      return { type: event.type, at: event.created_at, email_id, from, to, subject, bounce: bounce.message };
    }
    case 'email.clicked': {
      const { email_id, from, to, subject, click } = event.data;
      return {
        type: event.type,
        at: event.created_at,
        email_id,
        from,
        to,
        subject,
        link: click.link,
        user_agent: click.userAgent,
        clicked_at: click.timestamp,
      };
    }
    case 'email.failed': {
      const { email_id, from, to, subject, failed } = event.data;
      return { type: event.type, at: event.created_at, email_id, from, to, subject, reason: failed.reason };
    }
    case 'email.suppressed': {
      const { email_id, from, to, subject, suppressed } = event.data;
      return { type: event.type, at: event.created_at, email_id, from, to, subject, why: suppressed.type };
    }
    case 'email.received': {
      const { email_id, from, to, subject, received_for, attachments } = event.data;
      const files = attachments.map((attachment) => [attachment.filename, attachment.content_type]);
      return { type: event.type, at: event.created_at, email_id, from, to, subject, received_for, files };
    }
    case 'domain.updated': {
      const { id, name, status } = event.data;
      return { type: event.type, at: event.created_at, id, name, status };
    }
    default:
      return { type: event.type, at: event.created_at };
  }
}

type Data = Record<string, any>;

/** What the handler must read, from the same event's Postwire rendering (`{ id, type, created_at, data }`). */
function expectedFromPostwire(event: { type: EventKind; created_at: string; data: Data }) {
  const { data } = event;
  const type = resendEventType(event.type);
  const base = {
    type,
    at: event.created_at,
    email_id: data.email_id,
    from: data.from,
    to: data.to,
    subject: data.subject,
  };
  switch (event.type) {
    case 'email.bounced':
      return { ...base, bounce: data.bounce.diagnostic };
    case 'email.clicked':
      return {
        ...base,
        link: data.click.url,
        user_agent: data.click.user_agent,
        clicked_at: event.created_at,
      };
    case 'email.failed':
      return { ...base, reason: data.smtp_response ?? data.error };
    case 'email.suppressed':
      return { ...base, why: data.suppression.reason };
    case 'email.received':
      return {
        type,
        at: event.created_at,
        email_id: data.received_email_id,
        from: data.from.address,
        to: data.to.map((address: Data) => address.address),
        subject: data.subject,
        received_for: [data.recipient],
        files: data.attachments.map((attachment: Data) => [attachment.filename, attachment.content_type]),
      };
    case 'domain.verified':
    case 'domain.failed':
      return { type, at: event.created_at, id: data.domain_id, name: data.name, status: data.status };
    case 'email.unsubscribed':
      return { type, at: event.created_at };
    default:
      return base;
  }
}

for (const engine of ALL_ENGINES) {
  describe(`webhooks in Resend's format (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let smtp: TestSmtpServer;
    let worker: SendingWorker;
    let resend: Resend;
    let postwireReceiver: Receiver;
    let resendReceiver: Receiver;
    let resendWebhookId: string;
    let secret: string;

    before(async () => {
      api = await startTestApp(engine, { allowPrivateUrls: true, worker: true, publicUrl: PUBLIC_URL });
      smtp = await startSmtpServer();
      postwireReceiver = await startReceiver();
      resendReceiver = await startReceiver();
      worker = await startSendingWorker(api, { relayPort: smtp.port, publicUrl: PUBLIC_URL });
      resend = new Resend(api.key, { baseUrl: `${api.baseUrl}/resend` });
    });
    after(async () => {
      await worker.stop();
      await postwireReceiver.close();
      await resendReceiver.close();
      await smtp.close();
      await api.close();
    });

    /** The delivery's payload, once Resend's SDK verified its signature (it throws otherwise). */
    const verified = (delivery: ReceivedRequest): WebhookEventPayload => {
      const header = (name: string) => String(delivery.headers[name]);
      return resend.webhooks.verify({
        payload: delivery.body,
        headers: {
          id: header('webhook-id'),
          timestamp: header('webhook-timestamp'),
          signature: header('webhook-signature'),
        },
        webhookSecret: secret,
      });
    };

    test('an endpoint made under /resend is resend-format; one made under /v1 is postwire-format', async () => {
      const events = [...new Set(EVENT_KIND_NAMES.map(resendEventType))] as WebhookEvent[];
      const created = await resend.webhooks.create({ endpoint: resendReceiver.url, events });
      assert.equal(created.error, null, JSON.stringify(created.error));
      resendWebhookId = created.data!.id;
      secret = created.data!.signing_secret;
      const viewed = await api.request('GET', `/v1/webhooks/${resendWebhookId}`);
      assert.equal(viewed.body.data.format, 'resend');
      assert.deepEqual([...viewed.body.data.events].sort(), [...EVENT_KIND_NAMES].sort());

      const postwire = await api.request('POST', '/v1/webhooks', {
        body: { url: postwireReceiver.url, events: EVENT_KIND_NAMES },
      });
      assert.equal(postwire.status, 201);
      assert.equal(postwire.body.data.format, 'postwire');

      // The format is a field like the others: given, changed, and refused when it is not one of the two.
      const other = await api.request('POST', '/v1/webhooks', {
        body: { url: postwireReceiver.url, events: ['email.sent'], format: 'resend', enabled: false },
      });
      assert.equal(other.body.data.format, 'resend');
      const patched = await api.request('PATCH', `/v1/webhooks/${other.body.data.id}`, {
        body: { format: 'postwire' },
      });
      assert.deepEqual([patched.status, patched.body.data.format], [200, 'postwire']);
      const bad = await api.request('PATCH', `/v1/webhooks/${other.body.data.id}`, {
        body: { format: 'svix' },
      });
      assert.deepEqual([bad.status, bad.body.error.param], [422, 'format']);
      assert.equal((await api.request('DELETE', `/v1/webhooks/${other.body.data.id}`)).status, 200);
    });

    test("every kind a send produces reaches a Resend handler in Resend's shape, verified, as the Postwire delivery says", async () => {
      // Sent, opened and clicked: a tracked send, its pixel fetched and its link followed like a mail client.
      const send = async (body: Record<string, unknown>) => {
        const response = await api.request('POST', '/v1/emails', {
          body: { from, subject: 'Offer', ...body },
        });
        assert.equal(response.status, 202, JSON.stringify(response.body));
        return response.body.id as string;
      };
      await send({
        to: 'ada@example.org',
        html: '<p><a href="https://shop.acme.test/offer">See the offer</a></p>',
        tracking: { opens: true, clicks: true },
        tags: { campaign: 'nov' },
      });
      const message = await until(() => smtp.messages.find((m) => m.to.includes('ada@example.org')));
      const mail = await parseMail(message.raw);
      const headers = { 'user-agent': BROWSER };
      assert.equal((await fetch(onServer(mail.pixel!, api.baseUrl), { headers })).status, 200);
      const link = mail.links.find((url) => url.startsWith(`${PUBLIC_URL}/c/`))!;
      const click = await fetch(onServer(link, api.baseUrl), { headers, redirect: 'manual' });
      assert.equal(click.status, 302);

      // Bounced, then suppressed: the relay refuses the address, which a second send then skips.
      smtp.onRecipient((address) =>
        address === 'gone@example.org'
          ? { code: 550, message: '5.1.1 <gone@example.org>: no such user' }
          : undefined,
      );
      await send({ to: 'gone@example.org', text: 'Hello' });
      await until(() => postwireEvents().some((event) => event.type === 'email.bounced'));
      await send({ to: 'gone@example.org', text: 'Hello again' });

      // Delayed, then failed: both attempts of the schedule are refused for now.
      smtp.scriptData(
        { code: 451, message: '4.7.1 Greylisted, try again later' },
        { code: 451, message: '4.7.1 Greylisted, try again later' },
      );
      await send({ to: 'later@example.org', text: 'Hello' });

      const kinds: EventKind[] = [
        'email.sent',
        'email.opened',
        'email.clicked',
        'email.bounced',
        'email.suppressed',
        'email.delivery_delayed',
        'email.failed',
      ];
      await until(() => kinds.every((kind) => postwireEvents().some((event) => event.type === kind)));
      const postwireById = new Map(postwireEvents().map((event) => [event.id, event]));
      // Every Postwire delivery has its Resend rendering: the same event (same webhook-id), read by the handler.
      await until(() => resendReceiver.requests.length >= postwireById.size);
      const seen = new Set<string>();
      for (const delivery of resendReceiver.requests) {
        const event = verified(delivery);
        const postwire = postwireById.get(String(delivery.headers['webhook-id']));
        assert.ok(postwire, `a Postwire delivery of ${event.type}`);
        assert.deepEqual(handle(event), expectedFromPostwire(postwire), event.type);
        assert.equal(event.created_at, postwire.created_at);
        seen.add(postwire.type);
      }
      assert.deepEqual([...seen].sort(), [...kinds].sort());

      // The exact shapes, from two of them: Resend's fields, with the recipient the event is about.
      const shapeOf = (type: string) =>
        JSON.parse(resendReceiver.requests.find((r) => JSON.parse(r.body).type === type)!.body);
      const bounced = shapeOf('email.bounced');
      assert.deepEqual(Object.keys(bounced), ['type', 'created_at', 'data']);
      assert.deepEqual(bounced.data.bounce, {
        message: '550 5.1.1 <gone@example.org>: no such user',
        subType: 'General',
        type: 'Permanent',
      });
      assert.deepEqual(Object.keys(bounced.data), [
        'email_id',
        'created_at',
        'message_id',
        'from',
        'to',
        'subject',
        'tags',
        'recipient',
        'bounce',
      ]);
      // The Message-ID the email was sent with, in both renderings.
      const sentEmail = await api.request('GET', `/v1/emails/${bounced.data.email_id}`);
      assert.match(sentEmail.body.message_id, /^<[^<>@]+@[^<>@]+>$/);
      assert.equal(bounced.data.message_id, sentEmail.body.message_id);
      const postwireBounce = postwireEvents().find((event) => event.type === 'email.bounced')!;
      assert.equal(postwireBounce.data.message_id, sentEmail.body.message_id);
      const clicked = shapeOf('email.clicked');
      assert.deepEqual(clicked.data.click, {
        ipAddress: '',
        link: 'https://shop.acme.test/offer',
        timestamp: clicked.created_at,
        userAgent: BROWSER,
      });
      assert.deepEqual(clicked.data.tags, { campaign: 'nov' });
    });

    test('the kinds a send does not produce here (reports, receiving, domains) render too: test sends', async () => {
      const kinds: EventKind[] = [
        'email.delivered',
        'email.complained',
        'email.unsubscribed',
        'email.received',
        'domain.verified',
        'domain.failed',
      ];
      const before = resendReceiver.requests.length;
      for (const kind of kinds) {
        const response = await api.request('POST', `/v1/webhooks/${resendWebhookId}/test`, {
          body: { type: kind },
        });
        assert.equal(response.status, 200, JSON.stringify(response.body));
        assert.equal(response.body.success, true, JSON.stringify(response.body));
      }
      const deliveries = resendReceiver.requests.slice(before);
      assert.equal(deliveries.length, kinds.length);
      deliveries.forEach((delivery, index) => {
        const kind = kinds[index]!;
        const event = verified(delivery);
        assert.deepEqual(
          handle(event),
          expectedFromPostwire({ type: kind, created_at: event.created_at, data: testEventData(kind) }),
          kind,
        );
      });
    });

    const postwireEvents = (): { id: string; type: EventKind; created_at: string; data: Data }[] =>
      postwireReceiver.requests.map((request) => JSON.parse(request.body));
  });
}
