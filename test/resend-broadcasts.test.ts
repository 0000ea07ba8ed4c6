import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Resend } from 'resend';
import { createBroadcastWorker } from '../src/modules/broadcasts/broadcasts.worker.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import type { QueueWorker } from '../src/queue/runtime.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { parseMail } from './helpers/engagement.ts';
import { startSendingWorker } from './helpers/sending.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';

// Resend's SDK, unchanged, drives broadcasts at /resend: create (draft, or with send and scheduledAt), get,
// list, update, send, cancel, duplicate, remove, recipients and clicked links; Resend's personalization
// (`{{{FIRST_NAME|there}}}`, properties, `{{{RESEND_UNSUBSCRIBE_URL}}}`) in what arrives; its errors.

const PUBLIC_URL = 'https://mail.acme.test';

function dataOf<T>(result: { data: T | null; error: unknown }): T {
  assert.equal(result.error, null, JSON.stringify(result.error));
  return result.data as T;
}

function assertError(
  result: { data: unknown; error: unknown },
  statusCode: number,
  name: string,
  message: string,
) {
  assert.equal(result.data, null);
  assert.deepEqual(result.error, { statusCode, name, message });
}

for (const engine of ALL_ENGINES) {
  describe(`the resend SDK's broadcasts against /resend (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let resend: Resend;
    let smtp: TestSmtpServer;
    let sending: SendingWorker;
    let fanOut: QueueWorker;
    before(async () => {
      api = await startTestApp(engine, { publicUrl: PUBLIC_URL });
      resend = new Resend(api.key, { baseUrl: `${api.baseUrl}/resend` });
      smtp = await startSmtpServer();
      sending = await startSendingWorker(api, { relayPort: smtp.port, publicUrl: PUBLIC_URL });
      fanOut = createBroadcastWorker({
        database: api.database.handle,
        clock: { now: () => new Date() },
        fanOut: api.services.fanOut,
        notifier: api.services.notifiers.broadcast,
        settings: { pollIntervalMs: 50 },
      });
      await fanOut.start();
    });
    after(async () => {
      await fanOut.stop();
      await sending.stop();
      await smtp.close();
      await api.close();
    });

    test('create and send, personalized in Resend’s dialect; get, list, recipients, clicked links', async () => {
      dataOf(
        await resend.contactProperties.create({ key: 'company', type: 'string', fallbackValue: 'your team' }),
      );
      const segment = dataOf(await resend.segments.create({ name: 'Customers' }));
      const ada = dataOf(
        await resend.contacts.create({
          email: 'ada@sdk.test',
          firstName: 'Ada',
          properties: { company: 'Acme' },
        }),
      );
      const bob = dataOf(await resend.contacts.create({ email: 'bob@sdk.test' }));
      dataOf(await resend.contacts.create({ email: 'cy@sdk.test', unsubscribed: true }));
      for (const email of ['ada@sdk.test', 'bob@sdk.test', 'cy@sdk.test']) {
        dataOf(await resend.contacts.segments.add({ email, segmentId: segment.id }));
      }

      const created = dataOf(
        await resend.broadcasts.create({
          name: 'Launch',
          segmentId: segment.id,
          from: 'Acme <news@acme.test>',
          subject: 'Hi {{{FIRST_NAME|there}}}',
          html: '<p>Hello {{{FIRST_NAME|there}}} {{{LAST_NAME}}} at {{{company}}} ({{{EMAIL}}})</p><a href="{{{RESEND_UNSUBSCRIBE_URL}}}">Unsubscribe</a>',
          send: true,
        }),
      );
      assert.match(created.id, /^bc_/);
      await smtp.waitFor(2);
      // The receiver has both before the worker has written their outcomes: the recipients read below wait for it.
      await sending.whenIdle();
      const to = (address: string) => smtp.messages.find((message) => message.to.includes(address))!;
      assert.equal(smtp.messages.filter((message) => message.to.includes('cy@sdk.test')).length, 0);
      const adaMail = await parseMail(to('ada@sdk.test').raw);
      const bobMail = await parseMail(to('bob@sdk.test').raw);
      assert.match(to('ada@sdk.test').raw, /^Subject: Hi Ada\r$/m);
      assert.match(to('bob@sdk.test').raw, /^Subject: Hi there\r$/m);
      assert.match(adaMail.html, /Hello Ada {2}at Acme \(ada@sdk\.test\)/);
      assert.match(bobMail.html, /Hello there {2}at your team \(bob@sdk\.test\)/);
      assert.ok(adaMail.unsubscribeUrl?.startsWith(`${PUBLIC_URL}/u/`));
      assert.ok(adaMail.links.includes(adaMail.unsubscribeUrl!));
      assert.notEqual(adaMail.unsubscribeUrl, bobMail.unsubscribeUrl);

      const got = dataOf(await resend.broadcasts.get(created.id));
      assert.deepEqual(
        { ...got, created_at: undefined, sent_at: undefined },
        {
          object: 'broadcast',
          id: created.id,
          name: 'Launch',
          audience_id: segment.id,
          segment_id: segment.id,
          status: 'sent',
          created_at: undefined,
          scheduled_at: null,
          sent_at: undefined,
          from: 'Acme <news@acme.test>',
          subject: 'Hi {{{FIRST_NAME|there}}}',
          reply_to: null,
          preview_text: null,
          topic_id: null,
          html: got.html,
          text: null,
        },
      );
      assert.ok(got.sent_at);
      const listed = dataOf(await resend.broadcasts.list());
      assert.equal(listed.data[0]!.id, created.id);
      assert.equal(listed.data[0]!.status, 'sent');
      const recipients = dataOf(await resend.broadcasts.recipients(created.id, { type: 'sent' }));
      assert.deepEqual(recipients.data.map((row) => [row.email, row.contact_id]).sort(), [
        ['ada@sdk.test', ada.id],
        ['bob@sdk.test', bob.id],
      ]);
      const links = dataOf(await resend.broadcasts.clickedLinks(created.id));
      assert.deepEqual(links.data, []);
    });

    test('draft, update, scheduled send, cancel, duplicate, remove; errors', async () => {
      const segment = dataOf(await resend.segments.create({ name: 'Later' }));
      const draft = dataOf(
        await resend.broadcasts.create({
          audienceId: segment.id,
          from: 'news@acme.test',
          subject: 'D',
          text: 'x',
        }),
      );
      assert.equal(dataOf(await resend.broadcasts.get(draft.id)).status, 'draft');
      assert.deepEqual(
        dataOf(await resend.broadcasts.update(draft.id, { subject: 'E', previewText: 'pre' })),
        {
          id: draft.id,
        },
      );
      const updated = dataOf(await resend.broadcasts.get(draft.id));
      assert.equal(updated.subject, 'E');
      assert.equal(updated.preview_text, 'pre');

      assert.deepEqual(dataOf(await resend.broadcasts.send(draft.id, { scheduledAt: 'in 2 days' })), {
        id: draft.id,
      });
      const scheduled = dataOf(await resend.broadcasts.get(draft.id));
      assert.equal(scheduled.status, 'queued');
      const ahead = Date.parse(scheduled.scheduled_at!) - Date.now();
      assert.ok(ahead > 47 * 3_600_000 && ahead <= 48 * 3_600_000, String(ahead));
      assertError(
        await resend.broadcasts.update(draft.id, { subject: 'F' }),
        409,
        'invalid_parameter',
        `The broadcast '${draft.id}' is scheduled: only a draft can be changed.`,
      );
      assert.deepEqual(dataOf(await resend.broadcasts.cancel(draft.id)), {
        object: 'broadcast',
        id: draft.id,
      });

      const copy = dataOf(await resend.broadcasts.duplicate(draft.id));
      assert.equal(copy.object, 'broadcast');
      assert.notEqual(copy.id, draft.id);
      assert.equal(dataOf(await resend.broadcasts.get(copy.id)).subject, 'E');
      assert.deepEqual(dataOf(await resend.broadcasts.remove(copy.id)), {
        object: 'broadcast',
        id: copy.id,
        deleted: true,
      });
      assertError(
        await resend.broadcasts.get(copy.id),
        404,
        'not_found',
        `No broadcast with id '${copy.id}'.`,
      );
      assertError(
        await resend.broadcasts.create({
          segmentId: 'seg_missing',
          from: 'news@acme.test',
          subject: 'S',
          html: 'x',
        }),
        404,
        'not_found',
        "No segment with id 'seg_missing'.",
      );
      const refused = await resend.broadcasts.create({
        segmentId: segment.id,
        from: 'not an address',
        subject: 'S',
        html: 'x',
      });
      assert.equal(refused.data, null);
      assert.equal((refused.error as { statusCode: number }).statusCode, 422);

      // Another project's broadcast is a 404.
      const other = await api.createProject('Elsewhere');
      const stranger = new Resend(other.key, { baseUrl: `${api.baseUrl}/resend` });
      assertError(
        await stranger.broadcasts.get(draft.id),
        404,
        'not_found',
        `No broadcast with id '${draft.id}'.`,
      );
    });
  });
}
