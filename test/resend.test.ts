import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Resend } from 'resend';
import { createDns } from '../src/lib/dns.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';
import { startReceiver } from './helpers/receiver.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';
import { until } from './helpers/until.ts';
import { startSendingWorker } from './helpers/sending.ts';

const EMAIL_ID = /^msg_[0-9a-z]{26}$/;
const from = 'Acme <hello@acme.example>';

/** What the SDK hands back for a refusal: Resend's error object, nothing else. */
function assertError(
  result: { data: unknown; error: unknown },
  statusCode: number,
  name: string,
  message: string | RegExp,
) {
  assert.equal(result.data, null);
  const error = result.error as { statusCode: number; name: string; message: string };
  assert.ok(error, 'an error');
  assert.deepEqual(Object.keys(error).sort(), ['message', 'name', 'statusCode']);
  assert.equal(error.statusCode, statusCode, JSON.stringify(error));
  assert.equal(error.name, name, JSON.stringify(error));
  if (typeof message === 'string') assert.equal(error.message, message);
  else assert.match(error.message, message);
}

/** The SDK's `data`, once it said there is no error. */
function dataOf<T>(result: { data: T | null; error: unknown }): T {
  assert.equal(result.error, null, JSON.stringify(result.error));
  return result.data as T;
}

for (const engine of ALL_ENGINES) {
  describe(`the resend SDK against /resend (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let dns: TestDnsServer;
    let smtp: TestSmtpServer;
    let worker: SendingWorker;
    let resend: Resend;

    before(async () => {
      dns = await startDnsServer();
      smtp = await startSmtpServer();
      api = await startTestApp(engine, {
        allowPrivateUrls: true,
        worker: true,
        dns: createDns({ servers: [dns.address] }),
      });
      // Sends leave through a relay to a test SMTP server: what the SDK sent is what arrives.
      worker = await startSendingWorker(api, { relayPort: smtp.port });
      resend = new Resend(api.key, { baseUrl: `${api.baseUrl}/resend` });
    });
    after(async () => {
      await worker.stop();
      await api.close();
      await smtp.close();
      await dns.close();
    });

    test('emails: send, get (last_event, tags as a list), list, and what arrives over SMTP', async () => {
      const sent = dataOf(
        await resend.emails.send({
          from,
          to: 'ada@example.org',
          cc: ['bob@example.org'],
          replyTo: 'support@acme.example',
          subject: 'Your receipt',
          html: '<p>Thanks!</p>',
          text: 'Thanks!',
          headers: { 'X-Entity-Ref-ID': 'r-1' },
          tags: [{ name: 'kind', value: 'receipt' }],
          attachments: [{ filename: 'receipt.txt', content: Buffer.from('paid in full') }],
        }),
      );
      assert.deepEqual(Object.keys(sent), ['id']);
      assert.match(sent.id, EMAIL_ID);

      const [message] = await smtp.waitFor(1);
      assert.deepEqual(message!.to.sort(), ['ada@example.org', 'bob@example.org']);
      assert.match(message!.raw, /^Subject: Your receipt$/m);
      assert.match(message!.raw, /^Reply-To: support@acme\.example$/m);
      assert.match(message!.raw, /^X-Entity-Ref-ID: r-1$/m);
      assert.match(message!.raw, /filename=receipt\.txt/);
      assert.ok(message!.raw.includes(Buffer.from('paid in full').toString('base64')));

      const email = await until(async () => {
        const got = dataOf(await resend.emails.get(sent.id));
        // A relay is not the last hop: accepted by it, the email is sent (delivered comes from its reports).
        return got.last_event === 'sent' && got;
      });
      assert.deepEqual(email, {
        object: 'email',
        id: sent.id,
        to: ['ada@example.org'],
        from,
        created_at: email.created_at,
        subject: 'Your receipt',
        bcc: null,
        cc: ['bob@example.org'],
        reply_to: ['support@acme.example'],
        last_event: 'sent',
        scheduled_at: null,
        message_id: email.message_id,
        html: '<p>Thanks!</p>',
        text: 'Thanks!',
        tags: [{ name: 'kind', value: 'receipt' }],
      });
      assert.equal(message!.messageId, email.message_id);

      const list = dataOf(await resend.emails.list({ limit: 1 }));
      assert.equal(list.object, 'list');
      assert.equal(list.has_more, false);
      assert.deepEqual(list.data, [
        {
          id: sent.id,
          to: ['ada@example.org'],
          from,
          created_at: email.created_at,
          subject: 'Your receipt',
          bcc: null,
          cc: ['bob@example.org'],
          reply_to: ['support@acme.example'],
          last_event: 'sent',
          scheduled_at: null,
          message_id: email.message_id,
        },
      ]);
    });

    test('emails: update (reschedule) and cancel a scheduled email; refusals', async () => {
      const at = new Date(Date.now() + 3_600_000).toISOString();
      const { id } = dataOf(
        await resend.emails.send({
          from,
          to: ['later@example.org'],
          subject: 'Later',
          text: 'x',
          scheduledAt: at,
        }),
      );
      assert.equal(dataOf(await resend.emails.get(id)).last_event, 'scheduled');

      const later = new Date(Date.now() + 7_200_000).toISOString();
      assert.deepEqual(dataOf(await resend.emails.update({ id, scheduledAt: later })), {
        object: 'email',
        id,
      });
      assert.equal(dataOf(await resend.emails.get(id)).scheduled_at, later);

      assertError(
        await resend.emails.update({ id, scheduledAt: '2020-01-01T00:00:00Z' }),
        422,
        'validation_error',
        'scheduled_at must be in the future to reschedule an email.',
      );
      assertError(
        await resend.emails.update({ id } as never),
        422,
        'missing_required_field',
        "The field 'scheduled_at' is required.",
      );

      assert.deepEqual(dataOf(await resend.emails.cancel(id)), { object: 'email', id });
      assert.equal(dataOf(await resend.emails.get(id)).last_event, 'canceled');
      assertError(
        await resend.emails.cancel(id),
        409,
        'invalid_parameter',
        `Email '${id}' is cancelled; only a scheduled email whose time has not come can be cancelled.`,
      );
      assertError(
        await resend.emails.update({ id, scheduledAt: later }),
        409,
        'invalid_parameter',
        `Email '${id}' is cancelled; only a scheduled email whose time has not come can be rescheduled.`,
      );
    });

    test('emails: refusals as Resend errors (validation, missing field, not found, unsupported fields)', async () => {
      assertError(
        await resend.emails.send({ from, subject: 'x', text: 'x' } as never),
        422,
        'missing_required_field',
        "The field 'to' is required.",
      );
      assertError(
        await resend.emails.send({ from: 'not an address', to: 'a@example.org', subject: 'x', text: 'x' }),
        422,
        'invalid_from_address',
        /^from /,
      );
      assertError(
        await resend.emails.send({
          from,
          to: 'a@example.org',
          subject: 'x',
          text: 'x',
          attachments: [{ filename: 'a.txt', content: 'not base64!' }],
        }),
        422,
        'invalid_attachment',
        'The content of attachments[0] must be base64.',
      );
      assertError(
        await resend.emails.send({ from, to: 'a@example.org', subject: 'x', text: 'x', topicId: 'top_1' }),
        422,
        'validation_error',
        'Postwire does not implement topics; leave topic_id out (one-click unsubscribe is `unsubscribe: true` on a send).',
      );
      assertError(
        await resend.emails.send({
          from,
          to: 'a@example.org',
          subject: 'x',
          text: 'x',
          attachments: [{ filename: 'a.pdf', path: 'https://example.com/a.pdf' }],
        }),
        422,
        'invalid_attachment',
        'Postwire does not fetch attachments from a URL; send the file as base64 `content`.',
      );
      assertError(
        await resend.emails.get('msg_00000000000000000000000000'),
        404,
        'not_found',
        "No email with id 'msg_00000000000000000000000000'.",
      );
      assertError(await resend.emails.get('nope'), 404, 'not_found', "No email with id 'nope'.");
    });

    test('batch.send, and an Idempotency-Key that makes a retried send one email', async () => {
      const batch = dataOf(
        await resend.batch.send([
          { from, to: 'one@example.org', subject: 'One', text: '1' },
          {
            from,
            to: ['two@example.org'],
            subject: 'Two',
            html: '<p>2</p>',
            tags: [{ name: 'n', value: '2' }],
          },
        ]),
      );
      assert.equal(batch.data.length, 2);
      for (const { id } of batch.data) assert.match(id, EMAIL_ID);
      assert.deepEqual(dataOf(await resend.emails.get(batch.data[1]!.id)).tags, [{ name: 'n', value: '2' }]);

      assertError(
        await resend.batch.send([
          { from, to: 'one@example.org', subject: 'One', text: '1' },
          { from, to: 'bad', subject: 'Two', text: '2' },
        ]),
        422,
        'validation_error',
        /\[1\]\.to/,
      );

      const body = { from, to: 'once@example.org', subject: 'Once', text: 'x' };
      const first = dataOf(await resend.emails.send(body, { idempotencyKey: 'resend-once-1' }));
      const again = await resend.emails.send(body, { idempotencyKey: 'resend-once-1' });
      assert.deepEqual(dataOf(again), first);
      assert.equal(again.headers?.['idempotent-replayed'], 'true');
      assertError(
        await resend.emails.send({ ...body, subject: 'Other' }, { idempotencyKey: 'resend-once-1' }),
        422,
        'invalid_idempotent_request',
        'This Idempotency-Key was used with a different request.',
      );
    });

    test('a bad or missing key, and what Postwire does not implement (501)', async () => {
      const stranger = new Resend('pw_not_a_key', { baseUrl: `${api.baseUrl}/resend` });
      assertError(await stranger.emails.get('msg_x'), 401, 'invalid_api_key', 'Unknown or revoked API key.');
      assertError(await stranger.contacts.list(), 401, 'invalid_api_key', 'Unknown or revoked API key.');
      const bare = await fetch(`${api.baseUrl}/resend/emails`);
      assert.equal(bare.status, 401);
      assert.deepEqual(await bare.json(), {
        statusCode: 401,
        name: 'missing_api_key',
        message: 'Missing API key: send the header `Authorization: Bearer <API_KEY>`.',
      });

      assertError(
        await resend.inboxes.list(),
        501,
        'application_error',
        'Postwire does not implement inboxes; at /resend it answers emails, batch, templates, domains, webhooks, API keys, contacts, contact properties, segments, topics, suppressions, received emails, broadcasts, automations, events, logs and usage (docs/api/resend.md).',
      );
      assertError(
        await resend.emails.share('msg_x'),
        501,
        'application_error',
        "Postwire does not implement POST /emails/msg_x/share of Resend's emails API (docs/api/resend.md says what /resend answers).",
      );
      const unknown = await fetch(`${api.baseUrl}/resend/nothing-here`, {
        headers: { authorization: `Bearer ${api.key}` },
      });
      assert.equal(unknown.status, 404);
      assert.deepEqual(await unknown.json(), {
        statusCode: 404,
        name: 'not_found',
        message: 'No route GET /nothing-here.',
      });
    });

    test('a rate limit answers rate_limit_exceeded', async () => {
      const limited = await startTestApp(engine, { rateLimit: { limit: 1, windowMs: 60_000 } });
      try {
        const client = new Resend(limited.key, { baseUrl: `${limited.baseUrl}/resend` });
        dataOf(await client.emails.list());
        assertError(
          await client.emails.list(),
          429,
          'rate_limit_exceeded',
          /^Too many requests; retry in \d+ s\.$/,
        );
      } finally {
        await limited.close();
      }
    });

    test('templates: create with variables and publish, get, list, update, duplicate, send, remove', async () => {
      const created = dataOf(
        await resend.templates
          .create({
            name: 'Welcome',
            alias: 'resend-welcome',
            subject: 'Hi {{ name }}',
            html: '<p>Hi {{ name }}, you have {{ count }} messages</p>',
            variables: [
              { key: 'name', type: 'string' },
              { key: 'count', type: 'number', fallbackValue: null },
            ],
          })
          .publish(),
      );
      assert.deepEqual(Object.keys(created).sort(), ['id', 'object']);
      assert.equal(created.object, 'template');

      const template = dataOf(await resend.templates.get('resend-welcome'));
      assert.deepEqual(template, {
        object: 'template',
        id: created.id,
        name: 'Welcome',
        alias: 'resend-welcome',
        subject: 'Hi {{ name }}',
        html: '<p>Hi {{ name }}, you have {{ count }} messages</p>',
        text: null,
        status: 'published',
        variables: ['name', 'count'].map((key) => ({
          key,
          type: 'string',
          fallback_value: null,
          created_at: template.created_at,
          updated_at: template.updated_at,
        })),
        from: null,
        reply_to: null,
        published_at: template.published_at,
        created_at: template.created_at,
        updated_at: template.updated_at,
        has_unpublished_versions: false,
        current_version_id: 'v1',
      });

      assert.deepEqual(dataOf(await resend.templates.update(created.id, { subject: 'Hello {{ name }}' })), {
        object: 'template',
        id: created.id,
      });
      const changed = dataOf(await resend.templates.get(created.id));
      assert.equal(changed.subject, 'Hello {{ name }}');
      assert.equal(changed.has_unpublished_versions, true);
      assert.deepEqual(dataOf(await resend.templates.publish(created.id)), {
        object: 'template',
        id: created.id,
      });
      assert.equal(dataOf(await resend.templates.get(created.id)).current_version_id, 'v2');

      const sent = dataOf(
        await resend.emails.send({
          from,
          to: 'ada@example.org',
          template: { id: 'resend-welcome', variables: { name: 'Ada', count: 3 } },
        }),
      );
      const email = dataOf(await resend.emails.get(sent.id));
      assert.equal(email.subject, 'Hello Ada');
      assert.equal(email.html, '<p>Hi Ada, you have 3 messages</p>');
      assertError(
        await resend.emails.send({
          from,
          to: 'ada@example.org',
          template: { id: 'resend-welcome', variables: { name: 'Ada' } },
        }),
        422,
        'validation_error',
        /count/,
      );

      const copy = dataOf(await resend.templates.duplicate(created.id));
      assert.equal(copy.object, 'template');
      assert.notEqual(copy.id, created.id);
      const copied = dataOf(await resend.templates.get(copy.id));
      assert.deepEqual(
        [copied.name, copied.alias, copied.subject, copied.status],
        ['Welcome (copy)', null, 'Hello {{ name }}', 'draft'],
      );

      const list = dataOf(await resend.templates.list());
      assert.deepEqual(
        list.data.map((item) => [item.id, item.name, item.status, item.alias]),
        [
          [copy.id, 'Welcome (copy)', 'draft', null],
          [created.id, 'Welcome', 'published', 'resend-welcome'],
        ],
      );
      assert.deepEqual(Object.keys(list.data[0]!).sort(), [
        'alias',
        'created_at',
        'id',
        'name',
        'published_at',
        'status',
        'updated_at',
      ]);

      assert.deepEqual(dataOf(await resend.templates.remove(copy.id)), {
        object: 'template',
        id: copy.id,
        deleted: true,
      });
      assertError(await resend.templates.get(copy.id), 404, 'not_found', `No template with id '${copy.id}'.`);
      assertError(
        await resend.templates.create({
          name: 'Wrong fallback',
          html: '<p>{{ seats }}</p>',
          variables: [{ key: 'seats', type: 'number', fallbackValue: 'two' as unknown as number }],
        }),
        422,
        'validation_error',
        "variables[0].fallback_value must be a number, as the type of 'seats' says.",
      );
      assertError(
        await resend.templates.create({
          name: 'Wrong fallback',
          html: '<p>{{ name }}</p>',
          variables: [
            { key: 'seats', type: 'number' },
            { key: 'name', type: 'string', fallbackValue: 2 as unknown as string },
          ],
        }),
        422,
        'validation_error',
        "variables[1].fallback_value must be a string, as the type of 'name' says.",
      );
      assertError(
        await resend.templates.create({ name: '', html: '<p>x</p>' }),
        422,
        'validation_error',
        "The field 'name' must not be empty.",
      );
    });

    test("templates: a variable's fallbackValue is what a send that omits the variable delivers", async () => {
      const created = dataOf(
        await resend.templates
          .create({
            name: 'Fallbacks',
            alias: 'resend-fallbacks',
            subject: 'Hi {{ name }}',
            html: '<p>{{ name }} has {{ seats }} seats</p>',
            variables: [
              { key: 'name', type: 'string', fallbackValue: 'friend' },
              { key: 'seats', type: 'number', fallbackValue: 2 },
            ],
          })
          .publish(),
      );
      const template = dataOf(await resend.templates.get(created.id));
      assert.deepEqual(
        template.variables!.map(({ key, type, fallback_value }) => ({ key, type, fallback_value })),
        [
          { key: 'name', type: 'string', fallback_value: 'friend' },
          { key: 'seats', type: 'number', fallback_value: 2 },
        ],
      );

      const omitted = dataOf(
        await resend.emails.send({ from, to: 'fallback@example.org', template: { id: 'resend-fallbacks' } }),
      );
      const message = await until(() => smtp.messages.find((m) => m.to.includes('fallback@example.org')));
      assert.match(message.raw, /^Subject: Hi friend$/m);
      assert.match(message.raw, /^<p>friend has 2 seats<\/p>$/m);
      assert.equal(dataOf(await resend.emails.get(omitted.id)).html, '<p>friend has 2 seats</p>');

      const given = dataOf(
        await resend.emails.send({
          from,
          to: 'fallback@example.org',
          template: { id: 'resend-fallbacks', variables: { name: 'Ada' } },
        }),
      );
      assert.equal(dataOf(await resend.emails.get(given.id)).html, '<p>Ada has 2 seats</p>');

      // An update's variables replace the old ones, fallbacks included.
      dataOf(
        await resend.templates.update(created.id, {
          variables: [
            { key: 'name', type: 'string' },
            { key: 'seats', type: 'number', fallbackValue: 5 },
          ],
        }),
      );
      assert.deepEqual(
        dataOf(await resend.templates.get(created.id)).variables!.map((v) => v.fallback_value),
        [null, 5],
      );
      assertError(
        await resend.templates.update(created.id, {
          variables: [{ key: 'seats', type: 'number', fallbackValue: '5' as unknown as number }],
        }),
        422,
        'validation_error',
        "variables[0].fallback_value must be a number, as the type of 'seats' says.",
      );
    });

    test('domains: create (records as Resend lists them), get, list, update, verify, remove', async () => {
      const created = dataOf(
        await resend.domains.create({ name: 'Mail.Resend.Example', region: 'eu-west-1' }),
      );
      assert.equal(created.name, 'mail.resend.example');
      assert.equal(created.status, 'pending');
      assert.deepEqual(created.capabilities, { sending: 'enabled', receiving: 'disabled' });
      const dkim = created.records.find((record) => record.record === 'DKIM');
      assert.ok(dkim, JSON.stringify(created.records));
      assert.deepEqual(Object.keys(dkim).sort(), ['name', 'record', 'status', 'ttl', 'type', 'value']);
      assert.equal(dkim.type, 'TXT');
      assert.equal(dkim.status, 'pending');
      assert.match(dkim.name, /\._domainkey\.mail\.resend\.example$/);
      assert.match(dkim.value, /^v=DKIM1; k=rsa; p=/);

      const got = dataOf(await resend.domains.get(created.id));
      assert.equal(got.object, 'domain');
      assert.deepEqual(got.records, created.records);
      const list = dataOf(await resend.domains.list());
      assert.deepEqual(
        list.data.map((domain) => [domain.id, domain.name, domain.status]),
        [[created.id, 'mail.resend.example', 'pending']],
      );

      // Its DKIM record published: verify looks it up, and the domain is verified.
      dns.add(dkim.name, { type: 'TXT', text: dkim.value });
      assert.deepEqual(dataOf(await resend.domains.verify(created.id)), { object: 'domain', id: created.id });
      assert.equal(dataOf(await resend.domains.get(created.id)).status, 'verified');

      assert.deepEqual(
        dataOf(await resend.domains.update({ id: created.id, capabilities: { sending: 'enabled' } })),
        {
          object: 'domain',
          id: created.id,
        },
      );
      assertError(
        await resend.domains.update({ id: created.id, openTracking: true }),
        422,
        'validation_error',
        'Postwire sets open tracking per send (`tracking.opens`) or for the server (TRACK_OPENS), not per domain.',
      );
      assertError(
        await resend.domains.update({ id: created.id, capabilities: { receiving: 'enabled' } }),
        422,
        'validation_error',
        /INBOUND_MX_HOST/,
      );
      assertError(
        await resend.domains.create({ name: 'mail.resend.example' }),
        409,
        'invalid_parameter',
        /already has the domain/,
      );
      assertError(
        await resend.domains.create({ name: 'not a domain' }),
        422,
        'validation_error',
        /not a domain/,
      );

      assert.deepEqual(dataOf(await resend.domains.remove(created.id)), {
        object: 'domain',
        id: created.id,
        deleted: true,
      });
      assertError(
        await resend.domains.get(created.id),
        404,
        'not_found',
        `No domain with id '${created.id}'.`,
      );
    });

    test("webhooks: Resend's endpoint and event names, create, get, list, update, remove", async () => {
      const endpoint = `${api.baseUrl}/hooks/resend`;
      const created = dataOf(
        await resend.webhooks.create({
          endpoint,
          events: ['email.sent', 'email.delivered', 'domain.updated'],
        }),
      );
      assert.equal(created.object, 'webhook');
      assert.match(created.signing_secret, /^whsec_[A-Za-z0-9+/]{43}=$/);

      const got = dataOf(await resend.webhooks.get(created.id));
      assert.deepEqual(got, {
        object: 'webhook',
        id: created.id,
        created_at: got.created_at,
        status: 'enabled',
        endpoint,
        events: ['email.sent', 'email.delivered', 'domain.updated'],
      });
      // Under /v1 the same webhook, in Postwire's kinds, with the secret the adapter made.
      const v1 = await api.request('GET', `/v1/webhooks/${created.id}`);
      assert.deepEqual(v1.body.data.events, [
        'email.sent',
        'email.delivered',
        'domain.verified',
        'domain.failed',
      ]);
      assert.equal(v1.body.data.has_secret, true);

      assert.deepEqual(
        dataOf(await resend.webhooks.update(created.id, { status: 'disabled', events: ['email.bounced'] })),
        { object: 'webhook', id: created.id },
      );
      const list = dataOf(await resend.webhooks.list());
      assert.deepEqual(list.data, [
        {
          id: created.id,
          created_at: got.created_at,
          status: 'disabled',
          endpoint,
          events: ['email.bounced'],
        },
      ]);

      assertError(
        await resend.webhooks.create({ endpoint, events: ['topic.created'] }),
        422,
        'validation_error',
        /^Postwire has no event 'topic\.created'; the events it sends are: email\.sent, .*contact\.topics_updated, broadcast\.sent, destination\.suspended, destination\.resumed, domain\.updated\.$/,
      );
      assertError(
        await resend.webhooks.create({ endpoint: '', events: ['email.sent'] }),
        422,
        'validation_error',
        "The field 'endpoint' must not be empty.",
      );
      assertError(await resend.webhooks.get('wh_nope'), 404, 'not_found', "No webhook with id 'wh_nope'.");

      assert.deepEqual(dataOf(await resend.webhooks.remove(created.id)), {
        object: 'webhook',
        id: created.id,
        deleted: true,
      });
      assertError(
        await resend.webhooks.remove(created.id),
        404,
        'not_found',
        `No webhook with id '${created.id}'.`,
      );
    });

    test("a webhook made with Resend's SDK delivers events its webhooks.verify accepts", async () => {
      const receiver = await startReceiver();
      try {
        const { id, signing_secret: secret } = dataOf(
          await resend.webhooks.create({ endpoint: receiver.url, events: ['email.sent'] }),
        );
        const sent = dataOf(
          await resend.emails.send({ from, to: 'hook@example.org', subject: 'Hook', text: 'x' }),
        );
        const [delivery] = await receiver.waitFor(1);
        const header = (name: string) => String(delivery!.headers[name]);
        const event = resend.webhooks.verify({
          payload: delivery!.body,
          headers: {
            id: header('webhook-id'),
            timestamp: header('webhook-timestamp'),
            signature: header('webhook-signature'),
          },
          webhookSecret: secret,
        }) as unknown as { type: string; data: { email_id: string } };
        assert.equal(event.type, 'email.sent');
        assert.equal(event.data.email_id, sent.id);
        assert.throws(() =>
          resend.webhooks.verify({
            payload: delivery!.body.replace('email.sent', 'email.bounced'),
            headers: {
              id: header('webhook-id'),
              timestamp: header('webhook-timestamp'),
              signature: header('webhook-signature'),
            },
            webhookSecret: secret,
          }),
        );
        dataOf(await resend.webhooks.remove(id));
      } finally {
        await receiver.close();
      }
    });

    test('webhooks: update moves the endpoint, events and status; rotateSigningSecret answers a new secret that signs', async () => {
      const receiver = await startReceiver();
      try {
        const created = dataOf(
          await resend.webhooks.create({
            endpoint: `${api.baseUrl}/hooks/elsewhere`,
            events: ['email.bounced'],
          }),
        );
        dataOf(await resend.webhooks.update(created.id, { status: 'disabled' }));
        assert.deepEqual(
          dataOf(
            await resend.webhooks.update(created.id, {
              endpoint: receiver.url,
              events: ['email.sent'],
              status: 'enabled',
            }),
          ),
          { object: 'webhook', id: created.id },
        );
        const got = dataOf(await resend.webhooks.get(created.id));
        assert.deepEqual([got.endpoint, got.events, got.status], [receiver.url, ['email.sent'], 'enabled']);

        const rotated = dataOf(await resend.webhooks.rotateSigningSecret(created.id));
        assert.deepEqual(Object.keys(rotated).sort(), ['id', 'object', 'signing_secret']);
        assert.deepEqual([rotated.object, rotated.id], ['webhook', created.id]);
        assert.match(rotated.signing_secret, /^whsec_[A-Za-z0-9+/]{43}=$/);
        assert.notEqual(rotated.signing_secret, created.signing_secret);
        assert.ok(
          !JSON.stringify(dataOf(await resend.webhooks.get(created.id))).includes(rotated.signing_secret),
          'the new secret is answered once, by the rotation',
        );

        const sent = dataOf(
          await resend.emails.send({ from, to: 'rotated@example.org', subject: 'Rotated', text: 'x' }),
        );
        const [delivery] = await receiver.waitFor(1);
        const headers = {
          id: String(delivery!.headers['webhook-id']),
          timestamp: String(delivery!.headers['webhook-timestamp']),
          signature: String(delivery!.headers['webhook-signature']),
        };
        const event = resend.webhooks.verify({
          payload: delivery!.body,
          headers,
          webhookSecret: rotated.signing_secret,
        }) as unknown as { type: string; data: { email_id: string } };
        assert.deepEqual([event.type, event.data.email_id], ['email.sent', sent.id]);
        // Within the rotation window the old secret signs too (two signatures), so receivers can switch over.
        assert.equal(headers.signature.split(' ').length, 2);

        assertError(
          await resend.webhooks.update(created.id, { status: 'paused' as 'enabled' }),
          422,
          'validation_error',
          /status/,
        );
        assertError(
          await resend.webhooks.update(created.id, { endpoint: 'not a url' }),
          422,
          'validation_error',
          /endpoint|url/,
        );
        assertError(
          await resend.webhooks.update('wh_nope', { status: 'disabled' }),
          404,
          'not_found',
          "No webhook with id 'wh_nope'.",
        );
        assertError(
          await resend.webhooks.rotateSigningSecret('wh_nope'),
          404,
          'not_found',
          "No webhook with id 'wh_nope'.",
        );
        dataOf(await resend.webhooks.remove(created.id));
      } finally {
        await receiver.close();
      }
    });

    test("webhooks.events.list, get, replay and events.attempts.list: the webhook's delivery log in Resend's shape", async () => {
      const receiver = await startReceiver();
      receiver.script({ status: 503, body: 'busy' });
      try {
        const { id } = dataOf(
          await resend.webhooks.create({ endpoint: receiver.url, events: ['email.sent'] }),
        );
        const sent = dataOf(
          await resend.emails.send({ from, to: 'log@example.org', subject: 'Log', text: 'x' }),
        );
        // The first attempt is answered 503, the retry 200.
        const events = await until(async () => {
          const page = dataOf(await resend.webhooks.events.list({ webhookId: id }));
          return page.data[0]?.status === 'success' && page;
        });
        const [event] = events.data;
        assert.deepEqual(events, {
          object: 'list',
          has_more: false,
          data: [{ id: event!.id, type: 'email.sent', created_at: event!.created_at, status: 'success' }],
        });
        assert.match(event!.id, /^dlv_/);

        const attempts = dataOf(
          await resend.webhooks.events.attempts.list({ webhookId: id, eventId: event!.id }),
        );
        const [first, second] = attempts.data;
        assert.deepEqual(attempts, {
          object: 'list',
          has_more: false,
          data: [
            { id: first!.id, http_status_code: 503, response: 'busy', sent_at: first!.sent_at },
            { id: second!.id, http_status_code: 200, response: 'ok', sent_at: second!.sent_at },
          ],
        });
        const paged = dataOf(
          await resend.webhooks.events.attempts.list({ webhookId: id, eventId: event!.id, limit: 1 }),
        );
        assert.deepEqual(paged, { object: 'list', has_more: true, data: [first] });
        const next = dataOf(
          await resend.webhooks.events.attempts.list({
            webhookId: id,
            eventId: event!.id,
            limit: 1,
            after: first!.id,
          }),
        );
        assert.deepEqual(next, { object: 'list', has_more: false, data: [second] });

        const got = dataOf(await resend.webhooks.events.get({ webhookId: id, eventId: event!.id }));
        assert.deepEqual(
          { ...got, payload: undefined },
          { object: 'webhook_event', ...event!, next_attempt_at: null, payload: undefined },
        );
        // The payload is what the receiver was sent.
        assert.deepEqual(got.payload, JSON.parse(receiver.requests[1]!.body));
        assert.equal(got.payload.type, 'email.sent');
        assert.equal((got.payload.data as { email_id: string }).email_id, sent.id);

        // A replay is a new delivery of the same event (the same webhook-id), due now.
        const replayed = dataOf(await resend.webhooks.events.replay({ webhookId: id, eventId: event!.id }));
        assert.equal(replayed.object, 'webhook_event');
        assert.match(replayed.id, /^dlv_/);
        assert.notEqual(replayed.id, event!.id);
        const [, , again] = await receiver.waitFor(3);
        assert.equal(again!.headers['webhook-id'], receiver.requests[1]!.headers['webhook-id']);
        assert.equal(again!.body, receiver.requests[1]!.body);
        const after = await until(async () => {
          const page = dataOf(await resend.webhooks.events.list({ webhookId: id }));
          return page.data[0]?.status === 'success' && page;
        });
        assert.deepEqual(
          after.data.map((item) => item.id),
          [replayed.id, event!.id],
        );
        assertError(
          await resend.webhooks.events.get({ webhookId: id, eventId: 'dlv_nope' }),
          404,
          'not_found',
          "No delivery with id 'dlv_nope'.",
        );
        dataOf(await resend.webhooks.update(id, { status: 'disabled' }));
        assertError(
          await resend.webhooks.events.replay({ webhookId: id, eventId: event!.id }),
          409,
          'invalid_parameter',
          `Webhook '${id}' is disabled; enable it (webhooks.update with status 'enabled') to replay events to it.`,
        );
        assertError(
          await resend.webhooks.events.replay({ webhookId: 'wh_nope', eventId: event!.id }),
          404,
          'not_found',
          "No webhook with id 'wh_nope'.",
        );
        assertError(
          await resend.webhooks.events.list({ webhookId: 'wh_nope' }),
          404,
          'not_found',
          "No webhook with id 'wh_nope'.",
        );
        assertError(
          await resend.webhooks.events.attempts.list({ webhookId: id, eventId: 'dlv_nope' }),
          404,
          'not_found',
          "No delivery with id 'dlv_nope'.",
        );
        assertError(
          await resend.webhooks.events.attempts.list({
            webhookId: id,
            eventId: event!.id,
            after: 'att_nope',
          }),
          422,
          'validation_error',
          'after must be an attempt id from this list.',
        );
        dataOf(await resend.webhooks.remove(id));
      } finally {
        await receiver.close();
      }
    });

    test('apiKeys: create (the token works once), list, remove (the token stops working)', async () => {
      const created = dataOf(await resend.apiKeys.create({ name: 'ci' }));
      assert.deepEqual(Object.keys(created).sort(), ['id', 'token']);
      const ci = new Resend(created.token, { baseUrl: `${api.baseUrl}/resend` });
      dataOf(await ci.emails.list());

      const list = dataOf(await resend.apiKeys.list());
      const listed = list.data.find((key) => key.id === created.id);
      assert.deepEqual(listed, {
        id: created.id,
        name: 'ci',
        created_at: listed!.created_at,
        last_used_at: null,
      });
      assert.ok(!JSON.stringify(list).includes(created.token), 'a list never shows a token');

      assert.deepEqual(dataOf(await resend.apiKeys.remove(created.id)), {
        object: 'api_key',
        id: created.id,
        deleted: true,
      });
      assertError(await ci.emails.list(), 401, 'invalid_api_key', 'Unknown or revoked API key.');
      assertError(
        await resend.apiKeys.remove(created.id),
        404,
        'not_found',
        `No API key with id '${created.id}'.`,
      );
      // Another project's key is not this project's to remove.
      const other = await api.createProject('Other');
      const otherKeys = dataOf(
        await new Resend(other.key, { baseUrl: `${api.baseUrl}/resend` }).apiKeys.list(),
      );
      assertError(
        await resend.apiKeys.remove(otherKeys.data[0]!.id),
        404,
        'not_found',
        `No API key with id '${otherKeys.data[0]!.id}'.`,
      );

      // Resend's sending_access, limited to one domain: it sends from that domain only, and reads nothing.
      const domain = dataOf(await resend.domains.create({ name: 'keys.example.com' }));
      const sender = dataOf(
        await resend.apiKeys.create({ name: 'sender', permission: 'sending_access', domain_id: domain.id }),
      );
      const sending = new Resend(sender.token, { baseUrl: `${api.baseUrl}/resend` });
      assertError(
        await sending.emails.send({
          from: 'a@elsewhere.example',
          to: 'b@example.org',
          subject: 's',
          text: 't',
        }),
        403,
        'restricted_api_key',
        "This key may send only from the domain 'keys.example.com'; 'elsewhere.example' is not it.",
      );
      assertError(
        await sending.emails.list(),
        403,
        'restricted_api_key',
        'This route needs a read_only key (or a full_access key); this key is sending_access.',
      );
      assertError(
        await resend.apiKeys.create({ name: 'sender', domain_id: 'dom_nope' }),
        422,
        'validation_error',
        /domain/,
      );
      assertError(
        await resend.apiKeys.create({ name: '' }),
        422,
        'validation_error',
        "The field 'name' must not be empty.",
      );
    });
  });
}
