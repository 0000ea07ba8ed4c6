import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { assertApiError, created } from './helpers/answers.ts';
import { BROWSER, onServer, parseMail } from './helpers/engagement.ts';
import { startSendingWorker } from './helpers/sending.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';
import { until } from './helpers/until.ts';

// A contact's activity (issue 37, item 1): GET /v1/contacts/{id}/activity lists the emails sent to its address
// (in any case, from before the contact existed too), newest first, each with its status and events at that
// address only; paginated like every list; another project's contact is a 404.

const PUBLIC_URL = 'https://mail.acme.test';

for (const engine of ALL_ENGINES) {
  describe(`contact activity (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let smtp: TestSmtpServer;
    let sending: SendingWorker;

    before(async () => {
      api = await startTestApp(engine, { publicUrl: PUBLIC_URL });
      smtp = await startSmtpServer();
      sending = await startSendingWorker(api, { relayPort: smtp.port, publicUrl: PUBLIC_URL });
    });
    after(async () => {
      await sending.stop();
      await smtp.close();
      await api.close();
    });

    /** Sends, and waits until the SMTP server has it; the email's id. */
    async function send(body: Record<string, unknown>): Promise<string> {
      const count = smtp.messages.length;
      const sent = await api.request('POST', '/v1/emails', {
        body: { from: 'Acme <hello@acme.test>', ...body },
      });
      assert.equal(sent.status, 202, JSON.stringify(sent.body));
      await smtp.waitFor(count + 1, 20_000);
      return sent.body.id;
    }

    test('the emails to the address, newest first, each with its events there', async () => {
      // Mail to the address before the contact exists, in another case, opened.
      const welcome = await send({
        to: 'Ada@Activity.test',
        subject: 'Welcome, Ada',
        html: '<p>Welcome aboard.</p>\n<p>Grüße ✓</p>',
        tracking: { opens: true },
      });
      const mail = await parseMail(smtp.messages.at(-1)!.raw);
      const open = await fetch(onServer(mail.pixel!, api.baseUrl), { headers: { 'user-agent': BROWSER } });
      assert.equal(open.status, 200);
      const ada = await created(api, '/v1/contacts', { email: 'ada@activity.test', first_name: 'Ada' });
      // To her and Bob at once: only her recipient's events are hers.
      const shared = await send({
        to: ['ada@activity.test', 'bob@activity.test'],
        subject: 'Team news',
        text: 'Line one\nLine two',
      });
      // Not to her: never listed.
      await send({ to: 'bob@activity.test', subject: 'Just Bob', text: 'Hi Bob' });

      const activity = await until(async () => {
        const page = await api.request('GET', `/v1/contacts/${ada.id}/activity`);
        assert.equal(page.status, 200, JSON.stringify(page.body));
        const [latest, first] = page.body.data;
        const types = (item: any) => (item?.events ?? []).map((event: any) => event.type);
        return latest &&
          types(latest).includes('email.sent') &&
          types(first).includes('email.opened') &&
          types(first).includes('email.sent')
          ? page.body
          : undefined;
      });
      assert.equal(activity.object, 'list');
      assert.equal(activity.has_more, false);
      assert.deepEqual(
        activity.data.map((item: any) => [
          item.object,
          item.id,
          item.subject,
          item.status,
          item.broadcast_id,
        ]),
        [
          ['contact_activity', shared, 'Team news', 'sent', null],
          ['contact_activity', welcome, 'Welcome, Ada', 'sent', null],
        ],
      );
      const [latest, first] = activity.data;
      assert.equal(latest.from, 'Acme <hello@acme.test>');
      // Newest first, each an event of the email at her address (Bob's email.sent is not hers).
      assert.deepEqual(
        latest.events.map((event: any) => event.type),
        ['email.sent'],
      );
      assert.deepEqual(
        first.events.map((event: any) => event.type),
        ['email.opened', 'email.sent'],
      );
      const opened = await api.request('GET', `/v1/events/${first.events[0].id}`);
      assert.equal(opened.status, 200);
      assert.equal(opened.body.data.email_id, welcome);

      // Paginated like every list; by email too.
      const one = await api.request('GET', `/v1/contacts/ada@activity.test/activity?limit=1`);
      assert.deepEqual(
        { ids: one.body.data.map((item: any) => item.id), has_more: one.body.has_more },
        { ids: [shared], has_more: true },
      );
      const next = await api.request('GET', `/v1/contacts/${ada.id}/activity?limit=1&after=${shared}`);
      assert.deepEqual(
        { ids: next.body.data.map((item: any) => item.id), has_more: next.body.has_more },
        { ids: [welcome], has_more: false },
      );
      const bad = await api.request('GET', `/v1/contacts/${ada.id}/activity?after=${ada.id}`);
      assertApiError(bad, 422, 'parameter_invalid', 'after must be an id from this list (msg_…).', 'after');
    });

    test("another project's contact is a 404; an unknown one too", async () => {
      const other = await api.createProject('other');
      const theirs = await created(api, '/v1/contacts', { email: 'ada@activity.test' }, other.key);
      const missing = await api.request('GET', `/v1/contacts/${theirs.id}/activity`);
      assertApiError(missing, 404, 'resource_missing', `No contact with id '${theirs.id}'.`, 'id');
      // Their contact with the same address sees none of this project's mail.
      const own = await api.request('GET', `/v1/contacts/${theirs.id}/activity`, { key: other.key });
      assert.equal(own.status, 200);
      assert.deepEqual(own.body, { object: 'list', data: [], has_more: false });
      const nobody = await api.request('GET', '/v1/contacts/nobody@activity.test/activity');
      assert.equal(nobody.status, 404);
    });
  });
}
