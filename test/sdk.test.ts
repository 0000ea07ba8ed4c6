import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import {
  AuthenticationError,
  ConflictError,
  ConnectionError,
  InvalidRequestError,
  NotFoundError,
  PermissionError,
  Postwire,
  PostwireError,
  RateLimitError,
  ValidationError,
  verifyWebhook,
  type WebhookEvent,
  WebhookVerificationError,
} from '../sdk/src/index.ts';
import { createDns } from '../src/lib/dns.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';
import { checkWebhookPayloads } from './helpers/contract.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { until } from './helpers/until.ts';
import { startSendingWorker } from './helpers/sending.ts';

// The SDK over real HTTP against the real server: a delivery worker posts to a real receiver, and a
// sending worker with the capture transport turns sends into events, as `npm start` does without SMTP.
const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '..');
const from = 'Acme <hello@acme.example>';
const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

describe('sdk', () => {
  let api: TestApp;
  let receiver: Receiver;
  let sender: SendingWorker;
  let postwire: Postwire;
  let dns: TestDnsServer;

  before(async () => {
    dns = await startDnsServer();
    api = await startTestApp('sqlite', {
      allowPrivateUrls: true,
      worker: true,
      dns: createDns({ servers: [dns.address] }),
    });
    receiver = await startReceiver();
    sender = await startSendingWorker(api);
    postwire = new Postwire(api.key, { baseUrl: api.baseUrl });
  });
  after(async () => {
    await sender.stop();
    await receiver.close();
    await api.close();
    await dns.close();
  });

  test('webhooks: create, list, get, update, test, deliveries, recover, delete', async () => {
    const created = await postwire.webhooks.create({
      url: `${receiver.url}/sdk`,
      events: ['email.delivered'],
      secret: SECRET,
    });
    const hook = created.data;
    assert.match(hook.id, /^wh_/);
    assert.deepEqual(
      { enabled: hook.enabled, events: hook.events, has_secret: hook.has_secret },
      { enabled: true, events: ['email.delivered'], has_secret: true },
    );
    const listed = await postwire.webhooks.list();
    assert.ok(listed.data.some((item) => item.id === hook.id));
    assert.equal((await postwire.webhooks.list({ limit: 1 })).data.length, 1);
    assert.deepEqual((await postwire.webhooks.get(hook.id)).data, hook);

    const tested = await postwire.webhooks.test(hook.id, { type: 'email.bounced' });
    assert.equal(tested.success, true);
    const deliveries = await postwire.webhooks.deliveries(hook.id);
    assert.deepEqual(
      deliveries.data.map((delivery) => delivery.id),
      [tested.delivery_id],
    );
    const recovered = await postwire.webhooks.recover(hook.id, {
      since: new Date(Date.now() - 60_000).toISOString(),
    });
    assert.deepEqual(
      { object: recovered.object, requeued: recovered.requeued },
      { object: 'webhook_recovery', requeued: 0 },
    );

    const disabled = await postwire.webhooks.update(hook.id, { enabled: false });
    assert.equal(disabled.data.enabled, false);
    assert.deepEqual(await postwire.webhooks.delete(hook.id), { data: { id: hook.id, deleted: true } });
    await assert.rejects(postwire.webhooks.get(hook.id), NotFoundError);
  });

  test('templates: create, get, list, update, publish, render, versions, delete', async () => {
    const template = await postwire.templates.create({
      name: 'Welcome',
      alias: 'sdk-welcome',
      subject: 'Hi {{ name }}',
      html: '<p>Hello {{ name }}</p>',
    });
    assert.match(template.id, /^tpl_/);
    assert.equal((await postwire.templates.get('sdk-welcome')).id, template.id);
    assert.ok((await postwire.templates.list()).data.some((item) => item.id === template.id));
    const updated = await postwire.templates.update(template.id, { subject: 'Welcome, {{ name }}' });
    assert.equal(updated.subject, 'Welcome, {{ name }}');
    const published = await postwire.templates.publish(template.id);
    assert.deepEqual(
      { object: published.object, version: published.version },
      { object: 'template', version: 1 },
    );
    const rendered = await postwire.templates.render(template.id, { variables: { name: 'Ada' } });
    assert.deepEqual(rendered, {
      object: 'rendered_template',
      subject: 'Welcome, Ada',
      html: '<p>Hello Ada</p>',
      text: 'Hello Ada',
      warnings: [],
    });
    assert.deepEqual(
      (await postwire.templates.versions(template.id)).data.map((version) => version.version),
      [1],
    );
    assert.equal((await postwire.templates.version(template.id, 1)).subject, 'Welcome, {{ name }}');
    assert.deepEqual(await postwire.templates.delete(template.id), {
      object: 'template',
      id: template.id,
      deleted: true,
    });
  });

  test('emails: send (with an Idempotency-Key of its own), get, list, raw, batch, reschedule, cancel', async () => {
    const keys: (string | null)[] = [];
    const recording = new Postwire(api.key, {
      baseUrl: api.baseUrl,
      fetch: async (input, init) => {
        const request = new Request(input, init);
        keys.push(request.headers.get('idempotency-key'));
        return fetch(request);
      },
    });
    const accepted = await recording.emails.send({
      from,
      to: ['ada@example.org'],
      subject: 'Hi',
      text: 'Hello',
    });
    assert.deepEqual(Object.keys(accepted).sort(), ['id', 'object']);
    await recording.emails.send(
      { from, to: 'bob@example.org', subject: 'Hi', text: 'Hello' },
      { idempotencyKey: 'mine-1' },
    );
    await recording.emails.get(accepted.id);
    assert.equal(keys.length, 3);
    assert.match(keys[0]!, /^[0-9a-f-]{36}$/);
    assert.deepEqual(keys.slice(1), ['mine-1', null]);

    const delivered = await until(
      async () => {
        const email = await postwire.emails.get(accepted.id);
        return email.status === 'delivered' && email;
      },
      8000,
      'the email to be delivered',
    );
    assert.deepEqual(delivered.to, ['ada@example.org']);
    assert.ok((await postwire.emails.list({ limit: 10 })).data.some((item) => item.id === accepted.id));
    const raw = await postwire.emails.raw(accepted.id);
    assert.match(raw.raw, /Subject: Hi/);

    const batch = await postwire.emails.sendBatch([
      { from, to: ['c@example.org'], subject: 'One', text: '1' },
      { from, to: ['d@example.org'], subject: 'Two', text: '2' },
    ]);
    assert.equal(batch.data.length, 2);

    const scheduled = await postwire.emails.send({
      from,
      to: ['e@example.org'],
      subject: 'Later',
      text: 'Later',
      scheduled_at: new Date(Date.now() + 3_600_000).toISOString(),
    });
    const later = new Date(Date.now() + 7_200_000).toISOString();
    const rescheduled = await postwire.emails.reschedule(scheduled.id, { scheduled_at: later });
    assert.equal(rescheduled.scheduled_at, later);
    const cancelled = await postwire.emails.cancel(scheduled.id);
    assert.equal(cancelled.status, 'cancelled');
  });

  test('a send retried after a lost answer is sent once: the same Idempotency-Key is replayed', async () => {
    const sent: string[] = [];
    let lose = true;
    const flaky = new Postwire(api.key, {
      baseUrl: api.baseUrl,
      fetch: async (input, init) => {
        const request = new Request(input, init);
        sent.push(request.headers.get('idempotency-key') ?? '');
        const response = await fetch(request);
        if (lose) {
          lose = false;
          // The server did the work; the client never hears of it.
          throw new TypeError('fetch failed: connection reset');
        }
        return response;
      },
    });
    const before = (await api.rowCounts()).emails!;
    const accepted = await flaky.emails.send({
      from,
      to: ['once@example.org'],
      subject: 'Once',
      text: 'Once',
    });
    assert.equal(sent.length, 2);
    assert.equal(sent[0], sent[1]);
    assert.equal((await api.rowCounts()).emails, before + 1);
    assert.equal((await postwire.emails.get(accepted.id)).to[0], 'once@example.org');
  });

  test('events, event kinds and suppressions', async () => {
    const kinds = await postwire.eventKinds.list();
    assert.ok(kinds.data.some((kind) => kind.type === 'email.delivered'));
    const events = await postwire.events.list({ type: 'email.sent', limit: 5 });
    assert.ok(events.data.length > 0);
    const event = await postwire.events.get(events.data[0]!.id);
    assert.equal(event.type, 'email.sent');
    const hook = await postwire.webhooks.create({ url: `${receiver.url}/redeliver`, events: ['email.sent'] });
    const redelivered = await postwire.events.redeliver(event.id, { webhook_id: hook.data.id });
    assert.equal(redelivered.delivery_ids.length, 1);

    const added = await postwire.suppressions.create({ addresses: ['Blocked@Example.org'] });
    assert.deepEqual(
      added.data.map((entry) => [entry.address, entry.reason]),
      [['blocked@example.org', 'manual']],
    );
    assert.ok((await postwire.suppressions.list({ reason: 'manual' })).data.length > 0);
    assert.equal((await postwire.suppressions.get('blocked@example.org')).reason, 'manual');
    assert.deepEqual(await postwire.suppressions.delete('blocked@example.org'), {
      object: 'suppression',
      address: 'blocked@example.org',
      deleted: true,
    });
  });

  test('contacts and contact properties: create, get, list, update, delete', async () => {
    const plan = await postwire.contactProperties.create({
      key: 'plan',
      type: 'string',
      fallback_value: 'free',
    });
    assert.equal((await postwire.contactProperties.get('plan')).id, plan.id);
    assert.equal(
      (await postwire.contactProperties.update(plan.id, { fallback_value: null })).fallback_value,
      null,
    );
    const ada = await postwire.contacts.create({ email: 'Ada@sdk.example', properties: { plan: 'pro' } });
    assert.equal(ada.email, 'ada@sdk.example');
    assert.deepEqual((await postwire.contacts.get('ada@sdk.example')).properties, { plan: 'pro' });
    const listed = await postwire.contacts.list({ property: 'plan:pro' });
    assert.deepEqual(
      listed.data.map((contact) => contact.id),
      [ada.id],
    );
    assert.equal((await postwire.contacts.update(ada.id, { unsubscribed: true })).unsubscribed, true);
    assert.deepEqual(await postwire.contacts.delete(ada.id), {
      object: 'contact',
      id: ada.id,
      deleted: true,
    });
    assert.equal((await postwire.contactProperties.list()).data.length, 1);
    assert.equal((await postwire.contactProperties.delete('plan')).deleted, true);
  });

  test('segments and topics: create, get, list, update, delete; a contact in a segment, its choices', async () => {
    const bea = await postwire.contacts.create({ email: 'bea@sdk.example' });
    const segment = await postwire.segments.create({ name: 'Readers' });
    assert.equal((await postwire.segments.update(segment.id, { name: 'Fans' })).name, 'Fans');
    assert.equal((await postwire.segments.addContact(segment.id, 'bea@sdk.example')).added, true);
    assert.deepEqual(
      (await postwire.segments.contacts(segment.id)).data.map((contact) => contact.id),
      [bea.id],
    );
    assert.deepEqual(
      (await postwire.segments.ofContact(bea.id)).data.map((each) => each.id),
      [segment.id],
    );
    assert.equal((await postwire.segments.removeContact(segment.id, bea.id)).deleted, true);
    assert.equal((await postwire.segments.get(segment.id)).name, 'Fans');
    assert.ok((await postwire.segments.list()).data.some((each) => each.id === segment.id));

    const topic = await postwire.topics.create({ name: 'News', default_subscription: 'opt_out' });
    assert.equal((await postwire.topics.update(topic.id, { description: 'Monthly' })).description, 'Monthly');
    const chosen = await postwire.topics.choose(bea.id, {
      topics: [{ id: topic.id, subscription: 'opt_in' }],
    });
    assert.deepEqual(
      chosen.data.map((each) => [each.topic_id, each.subscription, each.chosen]),
      [[topic.id, 'opt_in', true]],
    );
    assert.equal((await postwire.topics.ofContact('bea@sdk.example')).data[0]!.subscription, 'opt_in');
    assert.deepEqual(
      (await postwire.contacts.list({ topic_id: topic.id })).data.map((contact) => contact.id),
      [bea.id],
    );
    assert.equal((await postwire.topics.get(topic.id)).default_subscription, 'opt_out');
    assert.equal((await postwire.topics.list()).data.length, 1);
    assert.equal((await postwire.topics.delete(topic.id)).deleted, true);
    assert.equal((await postwire.segments.delete(segment.id)).deleted, true);
  });

  test('domains: create, list, get, update, verify, rotate the key, delete; inbound routes, received emails, inbound messages', async () => {
    const domain = await postwire.domains.create({ name: 'sdk.example' });
    assert.deepEqual([domain.object, domain.name, domain.status], ['domain', 'sdk.example', 'pending']);
    assert.ok(domain.records.length > 0);
    assert.ok((await postwire.domains.list()).data.some((item) => item.id === domain.id));
    assert.equal((await postwire.domains.get(domain.id)).id, domain.id);
    // Nothing is published in the test DNS server: the check finds nothing and the domain stays pending.
    const verified = await postwire.domains.verify(domain.id);
    assert.equal(verified.status, 'pending');
    // The check found no SPF, key or DMARC: the compliance list says so.
    assert.equal(verified.compliance?.find((check) => check.check === 'dkim_key')?.status, 'fail');
    const dmarc = await postwire.domains.dmarc(domain.id, { since: '2026-11-01', until: '2026-11-28' });
    assert.deepEqual([dmarc.object, dmarc.reports, dmarc.sources], ['dmarc_summary', 0, []]);
    const rotated = await postwire.domains.rotateKey(domain.id);
    assert.ok(rotated.records.some((record) => record.rotation === 'next'));
    assert.equal((await postwire.domains.delete(domain.id)).deleted, true);
    await assert.rejects(postwire.domains.get(domain.id), NotFoundError);

    // Receiving needs INBOUND_MX_HOST, which this server does not have: a typed 422 saying so.
    await assert.rejects(postwire.domains.update(domain.id, { receiving: true }), NotFoundError);
    const kept = await postwire.domains.create({ name: 'inbound.sdk.example' });
    await assert.rejects(postwire.domains.update(kept.id, { receiving: true }), (error: unknown) => {
      assert.ok(error instanceof ValidationError);
      assert.equal(error.code, 'receiving_unavailable');
      return true;
    });
    assert.equal((await postwire.domains.update(kept.id, { receiving: false })).receiving, false);
    const route = await postwire.inboundRoutes.create({ match: '*@inbound.sdk.example', action: 'store' });
    assert.deepEqual(
      [route.object, route.match, route.priority],
      ['inbound_route', '*@inbound.sdk.example', 100],
    );
    assert.equal((await postwire.inboundRoutes.update(route.id, { priority: 5 })).priority, 5);
    assert.equal((await postwire.inboundRoutes.get(route.id)).priority, 5);
    assert.ok((await postwire.inboundRoutes.list()).data.some((item) => item.id === route.id));
    assert.equal((await postwire.inboundRoutes.delete(route.id)).deleted, true);
    assert.deepEqual((await postwire.receivedEmails.list({ limit: 5 })).data, []);
    await assert.rejects(postwire.receivedEmails.raw('rcv_01m8362j4ke00a6yqc5prman4d'), NotFoundError);
    await assert.rejects(
      postwire.receivedEmails.attachment('rcv_01m8362j4ke00a6yqc5prman4d', 0),
      NotFoundError,
    );

    const inbound = await postwire.inboundMessages.list({ limit: 5 });
    assert.deepEqual([inbound.object, inbound.data], ['list', []]);
    await assert.rejects(postwire.inboundMessages.get('inb_01m8362j4ke00a6yqc5prman4d'), NotFoundError);
  });

  test('api keys: create, list, get, current, remove; a read_only key gets a PermissionError', async () => {
    const created = await postwire.apiKeys.create({ name: 'reporting', permission: 'read_only' });
    assert.deepEqual([created.object, created.permission, created.domain_id], ['api_key', 'read_only', null]);
    assert.ok((await postwire.apiKeys.list()).data.some((key) => key.id === created.id));
    assert.equal((await postwire.apiKeys.get(created.id)).name, 'reporting');
    const reader = new Postwire(created.token, { baseUrl: api.baseUrl });
    assert.equal((await reader.apiKeys.current()).id, created.id);
    await assert.rejects(reader.apiKeys.create({ name: 'no' }), (error: unknown) => {
      assert.ok(error instanceof PermissionError);
      assert.equal(error.code, 'insufficient_permission');
      assert.equal(error.message, 'This route needs a full_access key; this key is read_only.');
      return true;
    });
    assert.equal((await postwire.apiKeys.remove(created.id)).deleted, true);
    assert.notEqual((await postwire.apiKeys.get(created.id)).revoked_at, null);
  });

  test('errors are typed and carry code, param and request_id', async () => {
    const invalid = await postwire.webhooks
      .create({ url: 'not a url', events: ['email.sent'] })
      .catch((error) => error);
    assert.ok(invalid instanceof ValidationError && invalid instanceof PostwireError);
    assert.deepEqual(
      { status: invalid.status, code: invalid.code, param: invalid.param, name: invalid.name },
      { status: 422, code: 'parameter_invalid', param: 'url', name: 'ValidationError' },
    );
    assert.match(invalid.request_id ?? '', /^req_/);
    assert.match(invalid.message, /url must be an absolute URL/);

    const missing = await postwire.emails.get('msg_01m8362j4ke00a6yqc5prman4d').catch((error) => error);
    assert.ok(missing instanceof NotFoundError);
    assert.equal(missing.code, 'resource_missing');

    const stranger = new Postwire('pw_not_a_key', { baseUrl: api.baseUrl });
    const denied = await stranger.webhooks.list().catch((error) => error);
    assert.ok(denied instanceof AuthenticationError);
    assert.deepEqual(
      [denied.status, denied.code, denied.message],
      [401, 'invalid_api_key', 'Unknown or revoked API key.'],
    );

    const hook = await postwire.webhooks.create({
      url: `${receiver.url}/off`,
      events: ['email.sent'],
      enabled: false,
    });
    const conflict = await postwire.webhooks.test(hook.data.id).catch((error) => error);
    assert.ok(conflict instanceof ConflictError);

    const notJson = await postwire.templates
      .create({ name: 'x'.repeat(2 * 1024 * 1024) })
      .catch((error) => error);
    assert.ok(notJson instanceof InvalidRequestError);
    assert.deepEqual([notJson.status, notJson.code], [413, 'body_too_large']);

    // No server on that port: nothing answers, after the retries.
    const nowhere = new Postwire(api.key, { baseUrl: 'http://127.0.0.1:9', maxRetries: 1 });
    await assert.rejects(nowhere.webhooks.list(), ConnectionError);
  });

  test('a 429 is a RateLimitError with retryAfter, once the retries are spent', async (t) => {
    const clock = { now: () => new Date('2026-11-23T10:00:00.000Z') };
    const limited = await startTestApp('sqlite', { rateLimit: { limit: 1, windowMs: 60_000 }, clock });
    t.after(() => limited.close());
    const client = new Postwire(limited.key, { baseUrl: limited.baseUrl, maxRetries: 0 });
    await client.webhooks.list();
    const error = await client.webhooks.list().catch((caught) => caught);
    assert.ok(error instanceof RateLimitError);
    assert.deepEqual([error.status, error.code, error.retryAfter], [429, 'rate_limited', 60]);
  });

  test('verifyWebhook accepts a real delivery and refuses a tampered one', async () => {
    const plain = 'a plain secret of enough length';
    const hooks = [
      await postwire.webhooks.create({
        url: `${receiver.url}/whsec`,
        events: ['email.delivered'],
        secret: SECRET,
      }),
      await postwire.webhooks.create({
        url: `${receiver.url}/plain`,
        events: ['email.delivered'],
        secret: plain,
      }),
    ];
    const accepted = await postwire.emails.send({
      from,
      to: ['verify@example.org'],
      subject: 'Verify',
      text: 'v',
    });
    const arrived = (suffix: string) =>
      receiver.requests.find(
        (request) => request.path.endsWith(suffix) && JSON.parse(request.body).data.email_id === accepted.id,
      );
    const [whsec, plainDelivery] = await until(
      () => {
        const found = [arrived('/whsec'), arrived('/plain')];
        return found.every(Boolean) && found;
      },
      8000,
      'the deliveries to /whsec and /plain',
    );

    const event: WebhookEvent = verifyWebhook(whsec!.body, whsec!.headers, SECRET);
    assert.equal(event.type, 'email.delivered');
    if (event.type !== 'email.delivered') return;
    assert.deepEqual(
      { email_id: event.data.email_id, recipient: event.data.recipient, id: event.id },
      { email_id: accepted.id, recipient: 'verify@example.org', id: whsec!.headers['webhook-id'] },
    );
    // A Fetch Headers and bytes work too; a plain secret is its UTF-8 bytes.
    const bytes = new TextEncoder().encode(plainDelivery!.body);
    const headers = new Headers(plainDelivery!.headers as Record<string, string>);
    assert.equal(verifyWebhook(bytes, headers, plain).id, event.id);

    const tampered = whsec!.body.replace('verify@example.org', 'mallory@example.org');
    assert.throws(() => verifyWebhook(tampered, whsec!.headers, SECRET), WebhookVerificationError);
    assert.throws(() => verifyWebhook(whsec!.body, whsec!.headers, plain), WebhookVerificationError);
    const noSignature = { ...whsec!.headers, 'webhook-signature': undefined };
    assert.throws(() => verifyWebhook(whsec!.body, noSignature, SECRET), WebhookVerificationError);
    // A body a framework already parsed is a mistake in the caller's code: a TypeError saying what to pass,
    // not a Buffer error from inside (nor a verification failure to answer 400 with).
    const parsed = JSON.parse(whsec!.body) as unknown;
    for (const [wrong, got] of [
      [parsed, 'an object (already parsed JSON?)'],
      [[parsed], 'an array'],
      [null, 'null'],
      [undefined, 'undefined'],
      [42, 'number'],
    ] as const) {
      assert.throws(
        () => verifyWebhook(wrong as never, whsec!.headers, SECRET),
        (error: unknown) =>
          error instanceof TypeError &&
          !(error instanceof WebhookVerificationError) &&
          error.message.startsWith(
            'verifyWebhook needs the raw request body exactly as received, as a string or bytes (Buffer, Uint8Array), ' +
              `but got ${got}. `,
          ) &&
          /parse the event verifyWebhook returns/.test(error.message),
        String(got),
      );
    }
    // A Node Buffer is bytes.
    assert.equal(verifyWebhook(Buffer.from(whsec!.body), whsec!.headers, SECRET).id, event.id);
    for (const hook of hooks) await postwire.webhooks.delete(hook.data.id);

    // Whatever reached the receiver in these tests (sends' events, test events) is what the types promise.
    const doc = (await api.request('GET', '/v1/openapi.json', { key: null })).body;
    assert.ok(receiver.requests.length >= 4);
    assert.deepEqual(
      checkWebhookPayloads(
        doc,
        receiver.requests.map((request) => request.body),
      ),
      [],
    );
  });

  test('the package builds to JavaScript and .d.ts, packs, and the built client works', async () => {
    const sdk = path.join(root, 'sdk');
    const { stdout } = await run('npm', ['pack', '--dry-run', '--json'], { cwd: sdk });
    const [pack] = JSON.parse(stdout.slice(stdout.indexOf('[')));
    const files = pack.files.map((file: { path: string }) => file.path).sort();
    for (const file of ['dist/index.js', 'dist/index.d.ts', 'dist/generated/openapi.d.ts', 'package.json']) {
      assert.ok(files.includes(file), `${file} is not packed: ${files.join(', ')}`);
    }
    assert.ok(!files.some((file: string) => file.startsWith('src/')), 'sources are not packed');
    // The package's dependencies are the ones the root installs (CI builds and tests it from there).
    const manifest = (file: string) => JSON.parse(readFileSync(file, 'utf8'));
    const rootManifest = manifest(path.join(root, 'package.json'));
    for (const [name, version] of Object.entries(manifest(path.join(sdk, 'package.json')).dependencies)) {
      assert.equal(rootManifest.devDependencies[name] ?? rootManifest.dependencies[name], version, name);
    }
    const built = await import(path.join(sdk, 'dist/index.js'));
    const client = new built.Postwire(api.key, { baseUrl: api.baseUrl });
    assert.equal((await client.eventKinds.list()).object, 'list');
  });
});
