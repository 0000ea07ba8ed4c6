import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';

// Who may see and change contacts: tenants apart, scoped keys; idempotent and concurrent writes; and contact.*
// events reaching a webhook.

for (const engine of ALL_ENGINES) {
  describe(
    `contacts: projects, keys, concurrent writes and events (${engine})`,
    { skip: engineSkip(engine) },
    () => {
      let api: TestApp;
      let receiver: Receiver;
      before(async () => {
        api = await startTestApp(engine, { allowPrivateUrls: true, worker: true });
        receiver = await startReceiver();
        await created('/v1/contact-properties', { key: 'plan', type: 'string' });
        await created('/v1/contacts', { email: 'ada@example.org', properties: { plan: 'pro' } });
      });
      after(async () => {
        await api.close();
        await receiver.close();
      });

      const created = async (path: string, body: unknown) => {
        const response = await api.request('POST', path, { body });
        assert.equal(response.status, 201, JSON.stringify(response.body));
        return response.body;
      };
      test('an Idempotency-Key replays the first answer: one contact, one contact.created', async () => {
        const headers = { 'idempotency-key': 'create-gus' };
        const body = { email: 'gus@example.org' };
        const first = await api.request('POST', '/v1/contacts', { body, headers });
        assert.equal(first.status, 201);
        const counts = await api.rowCounts();
        const again = await api.request('POST', '/v1/contacts', { body, headers });
        assert.equal(again.status, 201);
        assert.equal(again.headers.get('idempotent-replayed'), 'true');
        assert.deepEqual(again.body, first.body);
        assert.deepEqual(await api.rowCounts(), counts, 'no second contact, no second event');
      });

      test('concurrent updates of one contact each keep the values the others set', async () => {
        const keys = ['k0', 'k1', 'k2', 'k3', 'k4', 'k5'];
        for (const key of keys) await created('/v1/contact-properties', { key, type: 'number' });
        const hal = await created('/v1/contacts', { email: 'hal@example.org' });
        const answers = await Promise.all(
          keys.map((key, index) =>
            api.request('PATCH', `/v1/contacts/${hal.id}`, { body: { properties: { [key]: index } } }),
          ),
        );
        assert.deepEqual(
          answers.map((answer) => answer.status),
          keys.map(() => 200),
        );
        const after = await api.request('GET', `/v1/contacts/${hal.id}`);
        assert.deepEqual(after.body.properties, { k0: 0, k1: 1, k2: 2, k3: 3, k4: 4, k5: 5 });
      });

      test("another project's contacts and properties are 404 and never listed", async () => {
        const other = await api.createProject('other');
        const theirs = await api.request('POST', '/v1/contacts', {
          key: other.key,
          body: { email: 'ada@example.org' },
        });
        assert.equal(theirs.status, 201, 'the same address in another project is another contact');
        const mine = await api.request('GET', '/v1/contacts/ada@example.org');
        assert.notEqual(mine.body.id, theirs.body.id);
        for (const [method, body] of [['GET'], ['PATCH', { first_name: 'x' }], ['DELETE']] as const) {
          const response = await api.request(method, `/v1/contacts/${theirs.body.id}`, body ? { body } : {});
          assert.equal(response.status, 404, `${method}`);
        }
        assert.equal(
          (await api.request('GET', '/v1/contact-properties/plan', { key: other.key })).status,
          404,
        );
        const listed = await api.request('GET', '/v1/contacts', { key: other.key });
        assert.deepEqual(
          listed.body.data.map((contact: any) => contact.id),
          [theirs.body.id],
        );
      });

      test('scoped keys: read_only reads, sending_access neither reads nor writes', async () => {
        const key = async (permission: string) =>
          (await api.request('POST', '/v1/api-keys', { body: { name: permission, permission } })).body.token;
        const readOnly = await key('read_only');
        const sending = await key('sending_access');
        assert.equal((await api.request('GET', '/v1/contacts', { key: readOnly })).status, 200);
        assert.equal(
          (await api.request('GET', '/v1/contact-properties/plan', { key: readOnly })).status,
          200,
        );
        const before = await api.rowCounts();
        for (const token of [readOnly, sending]) {
          for (const [method, path, body] of [
            ['POST', '/v1/contacts', { email: 'z@example.org' }],
            ['PATCH', '/v1/contacts/ada@example.org', { first_name: 'Z' }],
            ['DELETE', '/v1/contacts/ada@example.org'],
            ['POST', '/v1/contact-properties', { key: 'z', type: 'string' }],
            ['DELETE', '/v1/contact-properties/plan'],
          ] as const) {
            const response = await api.request(method, path, { key: token, ...(body ? { body } : {}) });
            assert.equal(response.status, 403, `${method} ${path}`);
            assert.equal(response.body.error.code, 'insufficient_permission');
          }
        }
        const read = await api.request('GET', '/v1/contacts', { key: sending });
        assert.equal(read.status, 403);
        assert.deepEqual(await api.rowCounts(), before, 'nothing stored');
      });

      test('contact.created, contact.updated and contact.deleted reach a webhook, committed with the write', async () => {
        const webhook = await api.request('POST', '/v1/webhooks', {
          body: { url: receiver.url, events: ['contact.created', 'contact.updated', 'contact.deleted'] },
        });
        assert.equal(webhook.status, 201, JSON.stringify(webhook.body));
        const fay = await created('/v1/contacts', { email: 'fay@example.org', properties: { plan: 'pro' } });
        const updated = await api.request('PATCH', `/v1/contacts/${fay.id}`, { body: { last_name: 'Lee' } });
        await api.request('DELETE', `/v1/contacts/${fay.id}`);
        // A refused write emits nothing.
        await api.request('POST', '/v1/contacts', {
          body: { email: 'fay@example.org', properties: { tier: 1 } },
        });
        const requests = await receiver.waitFor(3);
        // Sorted by event id (ids sort in creation order): deliveries may arrive in any order.
        const bodies = requests
          .map((request) => JSON.parse(request.body))
          .sort((a, b) => (a.id < b.id ? -1 : 1));
        const data = (contact: any) => ({
          id: contact.id,
          email: contact.email,
          first_name: contact.first_name,
          last_name: contact.last_name,
          unsubscribed: contact.unsubscribed,
          properties: contact.properties,
          segment_ids: [],
          created_at: contact.created_at,
          updated_at: contact.updated_at,
        });
        assert.deepEqual(
          bodies.map((body) => [body.type, body.data]),
          [
            ['contact.created', data(fay)],
            ['contact.updated', data(updated.body)],
            ['contact.deleted', data(updated.body)],
          ],
        );
        for (const body of bodies) assert.match(body.id, /^evt_/);
        const events = await api.request('GET', '/v1/events?type=contact.created');
        assert.equal(events.status, 200);
        assert.ok(events.body.data.some((event: any) => event.data.id === fay.id));
      });
    },
  );
}
