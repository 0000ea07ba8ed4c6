import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Resend } from 'resend';
import { contactImportWorker } from './helpers/contact-imports.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';

// Resend's SDK, unchanged, drives contacts (global, by id or by email) and contact properties at /resend:
// what it answers, what it refuses (as Resend's errors), and contact events its webhooks.verify accepts.

function assertError(
  result: { data: unknown; error: unknown },
  statusCode: number,
  name: string,
  message: string,
) {
  assert.equal(result.data, null);
  assert.deepEqual(result.error, { statusCode, name, message });
}

function dataOf<T>(result: { data: T | null; error: unknown }): T {
  assert.equal(result.error, null, JSON.stringify(result.error));
  return result.data as T;
}

for (const engine of ALL_ENGINES) {
  describe(`the resend SDK's contacts against /resend (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let resend: Resend;
    let receiver: Receiver;
    before(async () => {
      api = await startTestApp(engine, { allowPrivateUrls: true, worker: true });
      resend = new Resend(api.key, { baseUrl: `${api.baseUrl}/resend` });
      receiver = await startReceiver();
    });
    after(async () => {
      await api.close();
      await receiver.close();
    });

    test('contactProperties: create, get, list, update, remove; refusals', async () => {
      const plan = dataOf(
        await resend.contactProperties.create({ key: 'plan', type: 'string', fallbackValue: 'free' }),
      );
      assert.deepEqual(Object.keys(plan).sort(), ['id', 'object']);
      assert.equal(plan.object, 'contact_property');
      const seats = dataOf(await resend.contactProperties.create({ key: 'seats', type: 'number' }));
      const got = dataOf(await resend.contactProperties.get(plan.id));
      assert.deepEqual(got, {
        object: 'contact_property',
        id: plan.id,
        key: 'plan',
        type: 'string',
        fallbackValue: 'free',
        createdAt: got.createdAt,
      });
      const listed = dataOf(await resend.contactProperties.list());
      assert.deepEqual(
        listed.data.map((property) => [property.key, property.type, property.fallbackValue]),
        [
          ['seats', 'number', null],
          ['plan', 'string', 'free'],
        ],
      );
      assert.equal(listed.has_more, false);
      assert.deepEqual(dataOf(await resend.contactProperties.update({ id: seats.id, fallbackValue: 1 })), {
        object: 'contact_property',
        id: seats.id,
      });
      assert.equal(dataOf(await resend.contactProperties.get(seats.id)).fallbackValue, 1);

      assertError(
        await resend.contactProperties.create({ key: 'plan', type: 'number' }),
        409,
        'invalid_parameter',
        "The project already has a contact property 'plan'.",
      );
      assertError(
        await resend.contactProperties.update({ id: seats.id, fallbackValue: 'many' }),
        422,
        'validation_error',
        "'seats' is declared as a number property: fallback_value must be a number, not a string.",
      );
      const temporary = dataOf(await resend.contactProperties.create({ key: 'temp', type: 'string' }));
      assert.deepEqual(dataOf(await resend.contactProperties.remove(temporary.id)), {
        object: 'contact_property',
        id: temporary.id,
        deleted: true,
      });
      assertError(
        await resend.contactProperties.get(temporary.id),
        404,
        'not_found',
        `No contact property with id '${temporary.id}'.`,
      );
    });

    test('contacts: create, get by id or email, list, update by email, remove; refusals', async () => {
      const created = dataOf(
        await resend.contacts.create({
          email: 'Ada@Example.org',
          firstName: 'Ada',
          lastName: 'Lovelace',
          properties: { plan: 'pro', seats: 3 },
        }),
      );
      assert.deepEqual(Object.keys(created).sort(), ['id', 'object']);
      const byId = dataOf(await resend.contacts.get(created.id));
      assert.deepEqual(byId, {
        object: 'contact',
        id: created.id,
        email: 'ada@example.org',
        first_name: 'Ada',
        last_name: 'Lovelace',
        unsubscribed: false,
        created_at: byId.created_at,
        properties: { plan: { type: 'string', value: 'pro' }, seats: { type: 'number', value: 3 } },
      });
      assert.deepEqual(dataOf(await resend.contacts.get({ email: 'ADA@example.org' })), byId);
      assert.deepEqual(dataOf(await resend.contacts.get({ id: created.id })), byId);

      const bob = dataOf(await resend.contacts.create({ email: 'bob@example.org', unsubscribed: true }));
      const listed = dataOf(await resend.contacts.list({ limit: 1 }));
      assert.equal(listed.has_more, true);
      assert.deepEqual(listed.data, [
        {
          id: bob.id,
          email: 'bob@example.org',
          first_name: null,
          last_name: null,
          unsubscribed: true,
          created_at: listed.data[0]!.created_at,
        },
      ]);
      const rest = dataOf(await resend.contacts.list({ limit: 1, after: bob.id }));
      assert.deepEqual(
        rest.data.map((contact) => contact.id),
        [created.id],
      );

      assert.deepEqual(
        dataOf(
          await resend.contacts.update({
            email: 'ada@example.org',
            firstName: null,
            properties: { seats: 4 },
          }),
        ),
        { object: 'contact', id: created.id },
      );
      const updated = dataOf(await resend.contacts.get(created.id));
      assert.equal(updated.first_name, null);
      assert.deepEqual(updated.properties.seats, { type: 'number', value: 4 });

      assertError(
        await resend.contacts.create({ email: 'ada@EXAMPLE.org' }),
        409,
        'invalid_parameter',
        "The project already has a contact 'ada@example.org'.",
      );
      assertError(
        await resend.contacts.create({ email: 'cy@example.org', properties: { tier: 'gold' } }),
        422,
        'validation_error',
        "'tier' is not a declared contact property; declare it first (POST /v1/contact-properties). Declared: plan, seats.",
      );
      assertError(
        await resend.contacts.update({ id: created.id, properties: { seats: true } }),
        422,
        'validation_error',
        "The field 'properties.seats' must be a string, a number or null.",
      );
      assertError(
        await resend.contacts.create({ email: 'cy@example.org', segments: [{ id: 'seg_1' }] }),
        404,
        'not_found',
        "No segment with id 'seg_1'.",
      );
      assertError(
        await resend.contacts.create({ email: 'not an address' }),
        422,
        'validation_error',
        "'not an address' is not an email address such as ada@example.org: is not of the form a@example.com.",
      );
      assert.equal(dataOf(await resend.contacts.list()).data.length, 2, 'nothing stored by the refusals');

      assert.deepEqual(dataOf(await resend.contacts.remove({ email: 'Bob@example.org' })), {
        object: 'contact',
        contact: bob.id,
        deleted: true,
      });
      assert.deepEqual(dataOf(await resend.contacts.remove(created.id)), {
        object: 'contact',
        contact: created.id,
        deleted: true,
      });
      assertError(
        await resend.contacts.get(created.id),
        404,
        'not_found',
        `No contact with id '${created.id}'.`,
      );
      assertError(
        await resend.contacts.remove({ email: 'bob@example.org' }),
        404,
        'not_found',
        "No contact with id 'bob@example.org'.",
      );
    });

    test("a read-only key reads contacts and may not write them; another project's contact is not found", async () => {
      const { token } = (
        await api.request('POST', '/v1/api-keys', { body: { name: 'reader', permission: 'read_only' } })
      ).body;
      const reader = new Resend(token, { baseUrl: `${api.baseUrl}/resend` });
      dataOf(await reader.contacts.list());
      const refused = await reader.contacts.create({ email: 'r@example.org' });
      assert.equal((refused.error as { statusCode: number; name: string }).statusCode, 403);
      assert.equal((refused.error as { name: string }).name, 'restricted_api_key');

      const other = await api.createProject('other');
      const theirs = dataOf(
        await new Resend(other.key, { baseUrl: `${api.baseUrl}/resend` }).contacts.create({
          email: 'o@example.org',
        }),
      );
      assertError(
        await resend.contacts.get(theirs.id),
        404,
        'not_found',
        `No contact with id '${theirs.id}'.`,
      );
      assertError(
        await resend.contacts.get({ email: 'o@example.org' }),
        404,
        'not_found',
        "No contact with id 'o@example.org'.",
      );
    });

    test("contact events reach a webhook made with the SDK, in Resend's payload shape, verified by it", async () => {
      const { signing_secret: secret } = dataOf(
        await resend.webhooks.create({
          endpoint: receiver.url,
          events: ['contact.created', 'contact.deleted'],
        }),
      );
      const { id } = dataOf(await resend.contacts.create({ email: 'hook@example.org', firstName: 'Hook' }));
      dataOf(await resend.contacts.remove(id));
      const deliveries = await receiver.waitFor(2);
      const events = deliveries.map((delivery) => {
        const header = (name: string) => String(delivery.headers[name]);
        return resend.webhooks.verify({
          payload: delivery.body,
          headers: {
            id: header('webhook-id'),
            timestamp: header('webhook-timestamp'),
            signature: header('webhook-signature'),
          },
          webhookSecret: secret,
        }) as unknown as { type: string; created_at: string; data: Record<string, unknown> };
      });
      // Deliveries may arrive in any order.
      assert.deepEqual(events.map((event) => event.type).sort(), ['contact.created', 'contact.deleted']);
      for (const event of events) {
        assert.deepEqual(event.data, {
          id,
          email: 'hook@example.org',
          first_name: 'Hook',
          last_name: null,
          unsubscribed: false,
          properties: {},
          segment_ids: [],
          created_at: event.data.created_at,
          updated_at: event.data.updated_at,
        });
      }
    });

    test('contacts.imports: create with a column map, get, list; a file that is not CSV refused', async () => {
      const worker = contactImportWorker(api);
      await worker.start();
      try {
        const segment = dataOf(await resend.segments.create({ name: 'Imported by the SDK' }));
        const topic = dataOf(await resend.topics.create({ name: 'Imports', defaultSubscription: 'opt_out' }));
        const csv = '\uFEFFMail,Vorname,Tier\r\nhanna@example.org,Hanna,pro\r\nnot an address,X,free\r\n';
        const created = dataOf(
          await resend.contacts.imports.create({
            file: new Blob([csv], { type: 'text/csv' }),
            columnMap: {
              email: 'Mail',
              firstName: 'Vorname',
              properties: { plan: { column: 'Tier', type: 'string' } },
            },
            onConflict: 'upsert',
            segments: [{ id: segment.id }],
            topics: [{ id: topic.id, subscription: 'opt_in' }],
          }),
        );
        assert.deepEqual(Object.keys(created).sort(), ['id', 'object']);
        assert.equal(created.object, 'contact_import');
        await worker.whenIdle();
        const got = dataOf(await resend.contacts.imports.get(created.id));
        assert.deepEqual(got, {
          object: 'contact_import',
          id: created.id,
          status: 'completed',
          created_at: got.created_at,
          completed_at: got.completed_at,
          counts: { total: 2, created: 1, updated: 0, skipped: 0, failed: 1 },
        });
        const hanna = dataOf(await resend.contacts.get({ email: 'hanna@example.org' }));
        assert.equal(hanna.first_name, 'Hanna');
        assert.deepEqual(hanna.properties, { plan: { type: 'string', value: 'pro' } });
        const inSegment = dataOf(await resend.contacts.list({ segmentId: segment.id }));
        assert.deepEqual(
          inSegment.data.map((each) => each.email),
          ['hanna@example.org'],
        );
        const listed = dataOf(await resend.contacts.imports.list({ status: 'completed' }));
        assert.ok(listed.data.some((each) => each.id === created.id));

        const refused = await resend.contacts.imports.create({
          file: new Blob(['email\r\n"open,quote\r\n'], { type: 'text/csv' }),
        });
        assert.equal(refused.data, null);
        assert.equal(
          (refused.error as { statusCode: number }).statusCode,
          400,
          JSON.stringify(refused.error),
        );
        assert.equal(
          (refused.error as { message: string }).message,
          'The file is not CSV at row 1: a quoted field is not closed.',
        );
        const unmapped = await resend.contacts.imports.create({
          file: new Blob([csv], { type: 'text/csv' }),
          columnMap: { email: 'Email' },
        });
        assert.equal(
          (unmapped.error as { statusCode: number }).statusCode,
          422,
          JSON.stringify(unmapped.error),
        );
      } finally {
        await worker.stop();
      }
    });

    test("contacts through an audience's path still answer 501", async () => {
      for (const result of [await resend.contacts.create({ audienceId: 'aud_1', email: 'a@example.org' })]) {
        assert.equal(result.data, null);
        assert.equal((result.error as { statusCode: number }).statusCode, 501, JSON.stringify(result.error));
        assert.equal((result.error as { name: string }).name, 'application_error');
      }
    });
  });
}
