import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Clock } from '../src/lib/clock.ts';
import { createBroadcastQueue } from '../src/modules/broadcasts/broadcasts.queue.ts';
import { createFanOut } from '../src/modules/broadcasts/fan-out.ts';
import { EVENT_KIND_NAMES } from '../src/modules/event-kinds/event-kinds.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import type { QueueWorker } from '../src/queue/runtime.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { assertApiError, created } from './helpers/answers.ts';
import { onServer, parseMail, waitForEvent } from './helpers/engagement.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { startBroadcastWorker, startSendingWorker } from './helpers/sending.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';

// Broadcasts under /v1: a broadcast to a segment arrives at a real SMTP server once per eligible contact,
// personalized, each copy with its own working one-click unsubscribe; the unsubscribed, the opted-out and the
// suppressed are excluded and counted; a fan-out that crashes half-way resumes without a duplicate or a miss.

const PUBLIC_URL = 'https://mail.acme.test';

function movableClock(): Clock & { advance(ms: number): void } {
  let offset = 0;
  return {
    now: () => new Date(Date.now() + offset),
    advance(ms) {
      offset += ms;
    },
  };
}

for (const engine of ALL_ENGINES) {
  describe(`broadcasts (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let smtp: TestSmtpServer;
    let receiver: Receiver;
    let sending: SendingWorker;
    let fanOut: QueueWorker;
    const clock = movableClock();

    before(async () => {
      api = await startTestApp(engine, {
        allowPrivateUrls: true,
        worker: true,
        clock,
        publicUrl: PUBLIC_URL,
      });
      smtp = await startSmtpServer();
      receiver = await startReceiver();
      await created(api, '/v1/webhooks', { url: receiver.url, events: EVENT_KIND_NAMES });
      sending = await startSendingWorker(api, { relayPort: smtp.port, clock, publicUrl: PUBLIC_URL });
      fanOut = await startBroadcastWorker(api, clock);
    });
    after(async () => {
      await fanOut.stop();
      await sending.stop();
      await receiver.close();
      await smtp.close();
      await api.close();
    });

    /** A segment of contacts (each created with `body`), and the ids by address. */
    async function audience(contacts: Array<Record<string, unknown>>) {
      const segment = await created(api, '/v1/segments', { name: `Audience ${Math.random()}` });
      const ids = new Map<string, string>();
      for (const body of contacts) {
        const contact = await created(api, '/v1/contacts', body);
        ids.set(contact.email, contact.id);
        const added = await api.request('POST', `/v1/contacts/${contact.id}/segments/${segment.id}`);
        assert.equal(added.status, 200, JSON.stringify(added.body));
      }
      return { segmentId: segment.id as string, ids };
    }

    const messagesTo = (address: string) => smtp.messages.filter((message) => message.to.includes(address));
    /** Waits (on the SMTP server's own signal) until `address` has received `count` messages. */
    async function received(address: string, count: number) {
      const deadline = Date.now() + 30_000;
      while (messagesTo(address).length < count) {
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`${address} received ${messagesTo(address).length} of ${count}`);
        await smtp.waitFor(smtp.messages.length + 1, left).catch(() => undefined);
      }
    }

    test('to a segment: one personalized copy per eligible contact, each with its own unsubscribe', async () => {
      await created(api, '/v1/contact-properties', { key: 'plan', type: 'string', fallback_value: 'free' });
      const topic = await created(api, '/v1/topics', { name: 'News', default_subscription: 'opt_in' });
      const { segmentId, ids } = await audience([
        { email: 'ada@news.test', first_name: 'Ada', properties: { plan: 'pro' } },
        { email: 'bob@news.test' },
        { email: 'carol@news.test', first_name: 'Carol', unsubscribed: true },
        { email: 'dan@news.test', first_name: 'Dan' },
        { email: 'eve@news.test', first_name: 'Eve' },
      ]);
      const optOut = await api.request('PATCH', `/v1/contacts/${ids.get('dan@news.test')}/topics`, {
        body: { topics: [{ id: topic.id, subscription: 'opt_out' }] },
      });
      assert.equal(optOut.status, 200);
      assert.equal(
        (await api.request('POST', '/v1/suppressions', { body: { addresses: ['eve@news.test'] } })).status,
        201,
      );
      // Not in the segment: never a copy.
      await created(api, '/v1/contacts', { email: 'frank@news.test' });

      const broadcast = await created(api, '/v1/broadcasts', {
        name: 'November',
        from: 'Acme News <news@acme.test>',
        reply_to: 'help@acme.test',
        subject: 'Hello {{ contact.first_name | default: "friend" }}',
        preview_text: 'What shipped',
        html: '<html><body><p>Hi {{ contact.first_name | default: "there" }}, you are on {{ contact.properties.plan }}.</p><a href="{{ unsubscribe_url }}">Unsubscribe</a></body></html>',
        text: 'Hi {{ contact.first_name | default: "there" }} ({{ contact.email }}). Leave: {{ unsubscribe_url }}',
        segment_id: segmentId,
        topic_id: topic.id,
        send: true,
      });
      assert.match(broadcast.id, /^bc_[0-9a-z]{26}$/);
      assert.equal(broadcast.status, 'sending');

      const sent = await waitForEvent(
        receiver,
        (event) => event.type === 'broadcast.sent' && event.data.id === broadcast.id,
        30_000,
      );
      assert.deepEqual(
        { copies: sent.data.copies, excluded: sent.data.excluded, segment_id: sent.data.segment_id },
        { copies: 2, excluded: 3, segment_id: segmentId },
      );
      await received('ada@news.test', 1);
      await received('bob@news.test', 1);
      assert.equal(messagesTo('ada@news.test').length, 1);
      assert.equal(messagesTo('bob@news.test').length, 1);
      for (const nobody of ['carol@news.test', 'dan@news.test', 'eve@news.test', 'frank@news.test']) {
        assert.equal(messagesTo(nobody).length, 0, nobody);
      }
      const ada = await parseMail(messagesTo('ada@news.test')[0]!.raw);
      const bob = await parseMail(messagesTo('bob@news.test')[0]!.raw);
      assert.match(messagesTo('ada@news.test')[0]!.raw, /^Subject: Hello Ada\r$/m);
      assert.match(messagesTo('bob@news.test')[0]!.raw, /^Subject: Hello friend\r$/m);
      assert.match(ada.html, /Hi Ada, you are on pro\./);
      assert.match(bob.html, /Hi there, you are on free\./);
      assert.match(ada.html, /display:none[^>]*>What shipped<\/div>/);
      assert.match(ada.text, /Hi Ada \(ada@news\.test\)/);
      assert.equal(ada.listUnsubscribePost, 'List-Unsubscribe=One-Click');
      assert.ok(ada.unsubscribeUrl?.startsWith(`${PUBLIC_URL}/u/`));
      assert.ok(ada.text.includes(ada.unsubscribeUrl!));
      assert.notEqual(ada.unsubscribeUrl, bob.unsubscribeUrl);

      // The broadcast: sent, with its counts; the exclusions with their reasons.
      const got = await api.request('GET', `/v1/broadcasts/${broadcast.id}`);
      assert.equal(got.status, 200);
      assert.equal(got.body.status, 'sent');
      assert.equal(got.body.counts.copies, 2);
      assert.equal(got.body.counts.excluded, 3);
      const exclusions = await api.request('GET', `/v1/broadcasts/${broadcast.id}/exclusions`);
      assert.deepEqual(exclusions.body.data.map((row: any) => [row.email, row.reason]).sort(), [
        ['carol@news.test', 'unsubscribed'],
        ['dan@news.test', 'topic_opt_out'],
        ['eve@news.test', 'suppressed'],
      ]);
      const recipients = await api.request('GET', `/v1/broadcasts/${broadcast.id}/recipients`);
      assert.deepEqual(recipients.body.data.map((row: any) => row.email).sort(), [
        'ada@news.test',
        'bob@news.test',
      ]);
      const adaRow = recipients.body.data.find((row: any) => row.email === 'ada@news.test');
      assert.equal(adaRow.contact_id, ids.get('ada@news.test'));
      // A copy is an ordinary email that names its broadcast.
      const email = await api.request('GET', `/v1/emails/${adaRow.email_id}`);
      assert.equal(email.body.broadcast_id, broadcast.id);

      // Ada's one-click unsubscribe: she leaves the topic at once (an event says so), stays sendable.
      const post = await fetch(onServer(ada.unsubscribeUrl!, api.baseUrl), {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: 'List-Unsubscribe=One-Click',
      });
      assert.equal(post.status, 200);
      const changed = await waitForEvent(
        receiver,
        (event) => event.type === 'contact.topics_updated' && event.data.id === ids.get('ada@news.test'),
      );
      assert.deepEqual(changed.data.topics, [
        { id: topic.id, subscription: 'opt_out', previous_subscription: 'opt_in' },
      ]);
      const topics = await api.request('GET', `/v1/contacts/${ids.get('ada@news.test')}/topics`);
      assert.equal(topics.body.data.find((row: any) => row.topic_id === topic.id).subscription, 'opt_out');
      assert.equal((await api.request('GET', '/v1/suppressions/ada@news.test')).status, 404);
      const after = await api.request('GET', `/v1/broadcasts/${broadcast.id}`);
      assert.equal(after.body.counts.unsubscribed, 1);
      const unsubscribed = await api.request(
        'GET',
        `/v1/broadcasts/${broadcast.id}/recipients?status=unsubscribed`,
      );
      assert.deepEqual(
        unsubscribed.body.data.map((row: any) => row.email),
        ['ada@news.test'],
      );

      // Bob's (no topic on the next broadcast): he leaves all broadcasts.
      const second = await created(api, '/v1/broadcasts', {
        from: 'news@acme.test',
        subject: 'Second',
        html: '<p>Again</p>',
        segment_id: segmentId,
        send: true,
      });
      await waitForEvent(
        receiver,
        (event) => event.type === 'broadcast.sent' && event.data.id === second.id,
        30_000,
      );
      await received('bob@news.test', 2);
      const bobAgain = await parseMail(messagesTo('bob@news.test')[1]!.raw);
      const bobPost = await fetch(onServer(bobAgain.unsubscribeUrl!, api.baseUrl), {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: 'List-Unsubscribe=One-Click',
      });
      assert.equal(bobPost.status, 200);
      const bobEvent = await waitForEvent(
        receiver,
        (event) => event.type === 'contact.updated' && event.data.id === ids.get('bob@news.test'),
      );
      assert.equal(bobEvent.data.unsubscribed, true);
      assert.equal(
        (await api.request('GET', `/v1/contacts/${ids.get('bob@news.test')}`)).body.unsubscribed,
        true,
      );
    });

    test('draft, update, schedule at a time, cancel before it starts, duplicate, delete; errors', async () => {
      const { segmentId } = await audience([{ email: 'sam@sched.test' }]);
      const draft = await created(api, '/v1/broadcasts', {
        from: 'news@acme.test',
        subject: 'Draft',
        html: '<p>x</p>',
        segment_id: segmentId,
      });
      assert.equal(draft.status, 'draft');
      const updated = await api.request('PATCH', `/v1/broadcasts/${draft.id}`, {
        body: { subject: 'Better', text: 'plain' },
      });
      assert.equal(updated.status, 200);
      assert.equal(updated.body.subject, 'Better');
      assert.equal(updated.body.text, 'plain');

      const at = new Date(clock.now().getTime() + 3_600_000).toISOString();
      const scheduled = await api.request('POST', `/v1/broadcasts/${draft.id}/send`, {
        body: { scheduled_at: at },
      });
      assert.equal(scheduled.status, 200, JSON.stringify(scheduled.body));
      assert.equal(scheduled.body.status, 'scheduled');
      assert.equal(scheduled.body.scheduled_at, at);
      assertApiError(
        await api.request('PATCH', `/v1/broadcasts/${draft.id}`, { body: { subject: 'Late' } }),
        409,
        'broadcast_not_draft',
        `The broadcast '${draft.id}' is scheduled: only a draft can be changed.`,
      );
      const canceled = await api.request('POST', `/v1/broadcasts/${draft.id}/cancel`);
      assert.deepEqual(canceled.body, { object: 'broadcast', id: draft.id });
      assert.equal((await api.request('GET', `/v1/broadcasts/${draft.id}`)).body.status, 'canceled');
      // Its time comes: nothing is sent.
      clock.advance(2 * 3_600_000);
      fanOut.wake();
      await fanOut.whenIdle();
      assert.equal(messagesTo('sam@sched.test').length, 0);

      const copy = await created(api, `/v1/broadcasts/${draft.id}/duplicate`, undefined);
      assert.equal(copy.status, 'draft');
      assert.equal(copy.subject, 'Better');
      assert.notEqual(copy.id, draft.id);
      const deleted = await api.request('DELETE', `/v1/broadcasts/${copy.id}`);
      assert.deepEqual(deleted.body, { object: 'broadcast', id: copy.id, deleted: true });
      assert.equal((await api.request('GET', `/v1/broadcasts/${copy.id}`)).status, 404);

      // Scheduled and due: the fan-out sends it once its time has come.
      const later = await created(api, '/v1/broadcasts', {
        from: 'news@acme.test',
        subject: 'Later',
        text: 'later',
        segment_id: segmentId,
        send: true,
        scheduled_at: new Date(clock.now().getTime() + 60_000).toISOString(),
      });
      assert.equal(later.status, 'scheduled');
      clock.advance(120_000);
      fanOut.wake();
      await waitForEvent(
        receiver,
        (event) => event.type === 'broadcast.sent' && event.data.id === later.id,
        30_000,
      );
      assertApiError(
        await api.request('POST', `/v1/broadcasts/${later.id}/cancel`),
        409,
        'broadcast_not_cancelable',
        `The broadcast '${later.id}' is sent: only a draft or a scheduled broadcast whose sending has not begun can be canceled.`,
      );
      assertApiError(
        await api.request('DELETE', `/v1/broadcasts/${later.id}`),
        409,
        'broadcast_not_deletable',
        `The broadcast '${later.id}' is sent: only a draft or a canceled broadcast can be deleted.`,
      );
      assertApiError(
        await api.request('POST', '/v1/broadcasts', {
          body: { from: 'news@acme.test', segment_id: 'seg_nope', html: 'x' },
        }),
        404,
        'resource_missing',
        "No segment with id 'seg_nope'.",
        'segment_id',
      );

      // Tenants: another project's broadcast is a 404 to this one, for every route.
      const other = await api.createProject('Other');
      for (const [method, path] of [
        ['GET', `/v1/broadcasts/${later.id}`],
        ['PATCH', `/v1/broadcasts/${later.id}`],
        ['POST', `/v1/broadcasts/${later.id}/send`],
        ['POST', `/v1/broadcasts/${later.id}/duplicate`],
        ['DELETE', `/v1/broadcasts/${later.id}`],
        ['GET', `/v1/broadcasts/${later.id}/recipients`],
      ] as const) {
        const response = await api.request(method, path, {
          key: other.key,
          ...(method === 'PATCH' || path.endsWith('/send') ? { body: {} } : {}),
        });
        assert.equal(response.status, 404, `${method} ${path}: ${JSON.stringify(response.body)}`);
      }
    });

    test('scoped keys: read_only reads, sending_access sends, a domain-limited key only its domain', async () => {
      const { segmentId } = await audience([{ email: 'kim@keys.test' }]);
      const key = async (body: Record<string, unknown>) =>
        (await created(api, '/v1/api-keys', body)).token as string;
      const reader = await key({ name: 'reader', permission: 'read_only' });
      const domain = await created(api, '/v1/domains', { name: 'acme.test' });
      const limited = await key({ name: 'limited', permission: 'sending_access', domain_id: domain.id });
      const draft = await created(api, '/v1/broadcasts', {
        from: 'news@other.test',
        subject: 'S',
        text: 't',
        segment_id: segmentId,
      });
      assert.equal((await api.request('GET', `/v1/broadcasts/${draft.id}`, { key: reader })).status, 200);
      const refused = await api.request('POST', '/v1/broadcasts', {
        key: reader,
        body: { from: 'news@acme.test', subject: 'S', text: 't', segment_id: segmentId },
      });
      assert.equal(refused.status, 403);
      const outside = await api.request('POST', `/v1/broadcasts/${draft.id}/send`, {
        key: limited,
        body: {},
      });
      assert.equal(outside.status, 403, JSON.stringify(outside.body));
      assert.equal(outside.body.error.code, 'insufficient_permission');
      assert.equal(outside.body.error.param, 'from');
      assert.equal((await api.request('GET', `/v1/broadcasts/${draft.id}`)).body.status, 'draft');
      const own = await created(api, '/v1/broadcasts', {
        from: 'news@acme.test',
        subject: 'S',
        text: 't',
        segment_id: segmentId,
      });
      const sent = await api.request('POST', `/v1/broadcasts/${own.id}/send`, { key: limited, body: {} });
      assert.equal(sent.status, 200, JSON.stringify(sent.body));
      await waitForEvent(
        receiver,
        (event) => event.type === 'broadcast.sent' && event.data.id === own.id,
        30_000,
      );
    });

    test('a fan-out that fails half-way resumes from its cursor: no duplicate, no contact missed', async () => {
      const contacts = Array.from({ length: 7 }, (_, index) => ({ email: `r${index}@resume.test` }));
      const { segmentId } = await audience(contacts);
      const draft = await created(api, '/v1/broadcasts', {
        from: 'news@acme.test',
        subject: 'Resume',
        text: 'hi',
        segment_id: segmentId,
      });
      // Sending, and held by a worker that will crash: claimed as the worker would, then one batch of 3 written.
      await fanOut.stop();
      const moved = await api.request('POST', `/v1/broadcasts/${draft.id}/send`, { body: {} });
      assert.equal(moved.status, 200);
      const queue = createBroadcastQueue(api.database.handle.db, api.database.handle.engine);
      const now = clock.now();
      const claimed = await queue.claimDue(
        { workerId: 'crashing', now, until: new Date(now.getTime() + 60_000) },
        10,
      );
      assert.deepEqual(claimed, [draft.id]);
      let batches = 0;
      const services = api.services;
      const crashing = createFanOut({
        db: api.database.handle.db,
        repo: services.repositories.broadcasts,
        segments: services.repositories.segments,
        topics: services.repositories.topics,
        suppressions: services.repositories.suppressions,
        properties: services.repositories.contactProperties,
        templates: services.repositories.templates,
        renderer: services.renderer,
        emails: {
          insert: async (emails, options, transaction) => {
            batches += 1;
            // The second batch dies inside its transaction: nothing of it may stay.
            if (batches === 2) throw new Error('the process died');
            return services.repositories.emails.insert(emails, options, transaction);
          },
        },
        tracking: services.repositories.tracking,
        senders: services.domains,
        events: services.events,
        clock,
        sendNotifier: services.notifiers.send,
        batchSize: 3,
      });
      await assert.rejects(crashing.run(draft.id, 'crashing', 60_000), /the process died/);
      assert.equal((await api.request('GET', `/v1/broadcasts/${draft.id}`)).body.counts.copies, 3);

      // Another worker takes it once the crashed one's lease has run out, and finishes from the cursor.
      clock.advance(120_000);
      fanOut = await startBroadcastWorker(api, clock);
      await waitForEvent(
        receiver,
        (event) => event.type === 'broadcast.sent' && event.data.id === draft.id,
        30_000,
      );
      const deadline = Date.now() + 8000;
      while (contacts.some((contact) => messagesTo(contact.email).length === 0) && Date.now() < deadline) {
        await smtp
          .waitFor(smtp.messages.length + 1, Math.max(1, deadline - Date.now()))
          .catch(() => undefined);
      }
      for (const contact of contacts) assert.equal(messagesTo(contact.email).length, 1, contact.email);
      const got = await api.request('GET', `/v1/broadcasts/${draft.id}`);
      assert.equal(got.body.counts.copies, 7);
      assert.equal(got.body.status, 'sent');
    });
  });
}
