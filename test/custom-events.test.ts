import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { assertApiError, created as createdIn, idsOf } from './helpers/answers.ts';

// Custom events under /v1/custom-events (/v1/events is the delivery events'): names declared with a payload
// schema (exact bodies), events sent for a contact by id or address (creating it when asked), the payload held
// to the schema, the Idempotency-Key honoured, another project's names and contacts not found.

const TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

for (const engine of ALL_ENGINES) {
  describe(`custom events (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    before(async () => {
      api = await startTestApp(engine);
    });
    after(() => api.close());

    const created = (path: string, body: unknown) => createdIn(api, path, body);

    test('declare, get by id or name, list, change the schema, delete: exact bodies', async () => {
      const signedUp = await created('/v1/custom-events', {
        name: 'user.signed_up',
        schema: { plan: 'string', seats: 'number', trial: 'boolean', renews_on: 'date' },
      });
      assert.match(signedUp.id, /^cev_[0-9a-z]{26}$/);
      assert.match(signedUp.created_at, TIME);
      assert.deepEqual(signedUp, {
        object: 'custom_event',
        id: signedUp.id,
        name: 'user.signed_up',
        schema: { plan: 'string', seats: 'number', trial: 'boolean', renews_on: 'date' },
        created_at: signedUp.created_at,
        updated_at: signedUp.created_at,
      });
      const paid = await created('/v1/custom-events', { name: 'invoice:paid' });
      assert.equal(paid.schema, null);
      assert.deepEqual((await api.request('GET', `/v1/custom-events/${signedUp.id}`)).body, signedUp);
      assert.deepEqual((await api.request('GET', '/v1/custom-events/user.signed_up')).body, signedUp);
      assert.deepEqual(idsOf(await api.request('GET', '/v1/custom-events')), [paid.id, signedUp.id]);

      const changed = await api.request('PATCH', '/v1/custom-events/invoice:paid', {
        body: { schema: { amount: 'number' } },
      });
      assert.equal(changed.status, 200);
      assert.deepEqual(changed.body, {
        ...paid,
        schema: { amount: 'number' },
        updated_at: changed.body.updated_at,
      });
      assert.ok(changed.body.updated_at > paid.updated_at);

      assertApiError(
        await api.request('POST', '/v1/custom-events', { body: { name: 'invoice:paid' } }),
        409,
        'custom_event_exists',
        "The project already declares an event 'invoice:paid'.",
        'name',
      );
      assertApiError(
        await api.request('POST', '/v1/custom-events', { body: { name: 'email.delivered' } }),
        422,
        'parameter_invalid',
        "'email.delivered' is one of Postwire's delivery event kinds; choose another name.",
        'name',
      );
      const removed = await api.request('DELETE', `/v1/custom-events/${paid.id}`);
      assert.deepEqual(removed.body, { object: 'custom_event', id: paid.id, deleted: true });
      assertApiError(
        await api.request('GET', '/v1/custom-events/invoice:paid'),
        404,
        'resource_missing',
        "No custom event with id 'invoice:paid'.",
        'id',
      );
      // The delivery events' list is untouched by custom ones.
      assert.equal((await api.request('GET', '/v1/events?type=email.sent')).status, 200);
    });

    test('send for a contact by id or address, creating it when asked; the payload held to the schema', async () => {
      await created('/v1/custom-events', { name: 'order.placed', schema: { total: 'number', at: 'date' } });
      const ada = await created('/v1/contacts', { email: 'ada@events.test', first_name: 'Ada' });

      const byId = await api.request('POST', '/v1/custom-events/send', {
        body: {
          event: 'order.placed',
          contact_id: ada.id,
          payload: { total: 42.5, at: '2026-11-29', note: 'ünïcode ✓' },
        },
      });
      assert.equal(byId.status, 201, JSON.stringify(byId.body));
      assert.match(byId.body.id, /^cevs_[0-9a-z]{26}$/);
      assert.deepEqual(byId.body, {
        object: 'custom_event_send',
        id: byId.body.id,
        event: 'order.placed',
        contact_id: ada.id,
        contact_created: false,
        payload: { total: 42.5, at: '2026-11-29', note: 'ünïcode ✓' },
        runs_started: 0,
        runs_resumed: 0,
        created_at: byId.body.created_at,
      });
      const byAddress = await api.request('POST', '/v1/custom-events/send', {
        body: { event: 'undeclared.thing', email: 'ADA@events.test' },
      });
      assert.equal(byAddress.status, 201);
      assert.equal(byAddress.body.contact_id, ada.id);
      assert.deepEqual(byAddress.body.payload, {});

      assertApiError(
        await api.request('POST', '/v1/custom-events/send', {
          body: { event: 'order.placed', email: 'new@events.test' },
        }),
        404,
        'resource_missing',
        "No contact with id 'new@events.test'.",
        'id',
      );
      const made = await api.request('POST', '/v1/custom-events/send', {
        body: { event: 'order.placed', email: 'new@events.test', create_contact: true },
      });
      assert.equal(made.status, 201);
      assert.equal(made.body.contact_created, true);
      const contact = await api.request('GET', '/v1/contacts/new@events.test');
      assert.equal(contact.body.id, made.body.contact_id);

      const before = await api.rowCounts();
      assertApiError(
        await api.request('POST', '/v1/custom-events/send', {
          body: { event: 'order.placed', contact_id: ada.id, payload: { total: '42' } },
        }),
        422,
        'parameter_invalid',
        "payload.total must be a number, as the event's schema declares.",
        'payload.total',
      );
      assertApiError(
        await api.request('POST', '/v1/custom-events/send', {
          body: { event: 'order.placed', contact_id: ada.id, payload: { at: 'tomorrow' } },
        }),
        422,
        'parameter_invalid',
        "payload.at must be a date, as the event's schema declares.",
        'payload.at',
      );
      assertApiError(
        await api.request('POST', '/v1/custom-events/send', {
          body: { event: 'order.placed', contact_id: ada.id, email: 'ada@events.test' },
        }),
        422,
        'parameter_invalid',
        'Send exactly one of contact_id, email.',
        'contact_id',
      );
      assertApiError(
        await api.request('POST', '/v1/custom-events/send', {
          body: { event: 'order.placed', contact_id: ada.id, create_contact: true },
        }),
        422,
        'parameter_invalid',
        'create_contact needs email (a contact_id names a contact that exists).',
        'create_contact',
      );
      assert.equal(
        (
          await api.request('POST', '/v1/custom-events/send', {
            body: { event: 'bad name', email: 'ada@events.test' },
          })
        ).status,
        422,
      );
      assert.deepEqual(await api.rowCounts(), before);
    });

    test('an Idempotency-Key answers the first send again, stored once', async () => {
      await created('/v1/contacts', { email: 'grace@events.test' });
      const send = () =>
        api.request('POST', '/v1/custom-events/send', {
          body: { event: 'user.logged_in', email: 'grace@events.test', payload: { device: 'phone' } },
          headers: { 'idempotency-key': 'login-1' },
        });
      const first = await send();
      assert.equal(first.status, 201);
      const counts = await api.rowCounts();
      const again = await send();
      assert.equal(again.status, 201);
      assert.deepEqual(again.body, first.body);
      assert.deepEqual(await api.rowCounts(), counts);
    });

    test("another project's names and contacts are not found", async () => {
      const other = await api.createProject('Other');
      const declared = await created('/v1/custom-events', { name: 'mine.only' });
      const ada = await created('/v1/contacts', { email: 'ada@isolated.test' });
      assert.equal(
        (await api.request('GET', `/v1/custom-events/${declared.id}`, { key: other.key })).status,
        404,
      );
      assert.equal((await api.request('GET', '/v1/custom-events/mine.only', { key: other.key })).status, 404);
      const sent = await api.request('POST', '/v1/custom-events/send', {
        key: other.key,
        body: { event: 'mine.only', contact_id: ada.id },
      });
      assert.equal(sent.status, 404);
      // Their own declaration of the same name is theirs.
      const theirs = await api.request('POST', '/v1/custom-events', {
        key: other.key,
        body: { name: 'mine.only' },
      });
      assert.equal(theirs.status, 201);
    });
  });
}
