import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ALL_ENGINES, type ApiResponse, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';

// Contacts and contact properties under /v1: exact bodies, bad input refused with nothing stored, property
// values held to their declared types (test/contacts-access.test.ts: projects, keys and events).

const TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

/** A Postwire error body, exactly. */
function assertError(response: ApiResponse, status: number, code: string, message: string, param?: string) {
  assert.equal(response.status, status, JSON.stringify(response.body));
  assert.deepEqual(response.body, {
    error: {
      code,
      message,
      ...(param === undefined ? {} : { param }),
      request_id: response.headers.get('x-request-id'),
    },
  });
}

for (const engine of ALL_ENGINES) {
  describe(`contacts and contact properties (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    before(async () => {
      api = await startTestApp(engine);
    });
    after(() => api.close());

    const created = async (path: string, body: unknown) => {
      const response = await api.request('POST', path, { body });
      assert.equal(response.status, 201, JSON.stringify(response.body));
      return response.body;
    };

    test('declares properties: exact bodies, by id or key, a key twice is 409, fallbacks of the type', async () => {
      const plan = await created('/v1/contact-properties', {
        key: 'plan',
        type: 'string',
        fallback_value: 'free',
      });
      assert.match(plan.id, /^cprop_[0-9a-z]{26}$/);
      assert.match(plan.created_at, TIME);
      assert.deepEqual(plan, {
        object: 'contact_property',
        id: plan.id,
        key: 'plan',
        type: 'string',
        fallback_value: 'free',
        created_at: plan.created_at,
        updated_at: plan.created_at,
      });
      const seats = await created('/v1/contact-properties', { key: 'seats', type: 'number' });
      assert.equal(seats.fallback_value, null);

      assert.deepEqual((await api.request('GET', `/v1/contact-properties/${plan.id}`)).body, plan);
      assert.deepEqual((await api.request('GET', '/v1/contact-properties/plan')).body, plan);
      const listed = await api.request('GET', '/v1/contact-properties');
      assert.deepEqual(listed.body, { object: 'list', data: [seats, plan], has_more: false });

      const before = await api.rowCounts();
      assertError(
        await api.request('POST', '/v1/contact-properties', { body: { key: 'plan', type: 'number' } }),
        409,
        'property_exists',
        "The project already has a contact property 'plan'.",
        'key',
      );
      assertError(
        await api.request('POST', '/v1/contact-properties', {
          body: { key: 'age', type: 'number', fallback_value: 'old' },
        }),
        422,
        'property_type_mismatch',
        "'age' is declared as a number property: fallback_value must be a number, not a string.",
        'fallback_value',
      );
      const badKey = await api.request('POST', '/v1/contact-properties', {
        body: { key: 'not ok', type: 'string' },
      });
      assert.equal(badKey.status, 422);
      assert.equal(badKey.body.error.param, 'key');
      assert.deepEqual(await api.rowCounts(), before, 'nothing stored');

      const updated = await api.request('PATCH', '/v1/contact-properties/seats', {
        body: { fallback_value: 1 },
      });
      assert.equal(updated.status, 200);
      assert.deepEqual(updated.body, { ...seats, fallback_value: 1, updated_at: updated.body.updated_at });
      assertError(
        await api.request('PATCH', '/v1/contact-properties/seats', { body: { fallback_value: 'two' } }),
        422,
        'property_type_mismatch',
        "'seats' is declared as a number property: fallback_value must be a number, not a string.",
        'fallback_value',
      );
      assertError(
        await api.request('GET', '/v1/contact-properties/nope'),
        404,
        'resource_missing',
        "No contact property with id 'nope'.",
        'id',
      );
    });

    test('creates a contact: lowercased, properties by key, an address twice (any case) is 409', async () => {
      const ada = await created('/v1/contacts', {
        email: 'Ada@Example.ORG',
        first_name: 'Ada',
        properties: { plan: 'pro', seats: 5 },
      });
      assert.match(ada.id, /^con_[0-9a-z]{26}$/);
      assert.deepEqual(ada, {
        object: 'contact',
        id: ada.id,
        email: 'ada@example.org',
        first_name: 'Ada',
        last_name: null,
        unsubscribed: false,
        properties: { plan: 'pro', seats: 5 },
        created_at: ada.created_at,
        updated_at: ada.created_at,
      });
      assert.deepEqual((await api.request('GET', `/v1/contacts/${ada.id}`)).body, ada);
      assert.deepEqual((await api.request('GET', '/v1/contacts/ADA@example.org')).body, ada);

      const before = await api.rowCounts();
      assertError(
        await api.request('POST', '/v1/contacts', { body: { email: 'ada@EXAMPLE.org' } }),
        409,
        'contact_exists',
        "The project already has a contact 'ada@example.org'.",
        'email',
      );
      assertError(
        await api.request('POST', '/v1/contacts', { body: { email: 'not an address' } }),
        422,
        'invalid_address',
        "'not an address' is not an email address such as ada@example.org: is not of the form a@example.com.",
        'email',
      );
      assertError(
        await api.request('POST', '/v1/contacts', {
          body: { email: 'b@example.org', properties: { tier: 'gold' } },
        }),
        422,
        'property_undeclared',
        "'tier' is not a declared contact property; declare it first (POST /v1/contact-properties). Declared: plan, seats.",
        'properties.tier',
      );
      assertError(
        await api.request('POST', '/v1/contacts', {
          body: { email: 'b@example.org', properties: { seats: '5' } },
        }),
        422,
        'property_type_mismatch',
        "'seats' is declared as a number property: properties.seats must be a number, not a string.",
        'properties.seats',
      );
      const unknownField = await api.request('POST', '/v1/contacts', {
        body: { email: 'b@example.org', age: 3 },
      });
      assert.equal(unknownField.status, 422);
      assert.deepEqual(await api.rowCounts(), before, 'nothing stored');
    });

    test('non-ASCII addresses: an IDN domain in any case or form is one contact; a non-ASCII local part is refused', async () => {
      // Unique and found whatever the case on both engines: the address is normalized in JS before it is
      // stored or looked up (the domain to its lowercase punycode, which folds case and Unicode form, the
      // ASCII local part lowercased), never by the engine's lower(), which folds only ASCII on SQLite.
      const ida = await created('/v1/contacts', { email: 'Ida@EXÄMPLE.org' });
      assert.equal(ida.email, 'ida@xn--exmple-cua.org');
      for (const form of [
        'ida@exämple.org',
        'IDA@Exämple.ORG',
        'ida@exa\u0308mple.org',
        'ida@xn--exmple-cua.org',
      ]) {
        const found = await api.request('GET', `/v1/contacts/${encodeURIComponent(form)}`);
        assert.equal(found.status, 200, form);
        assert.equal(found.body.id, ida.id, form);
      }
      const before = await api.rowCounts();
      assertError(
        await api.request('POST', '/v1/contacts', { body: { email: 'IDA@exa\u0308mple.ORG' } }),
        409,
        'contact_exists',
        "The project already has a contact 'ida@xn--exmple-cua.org'.",
        'email',
      );
      // No SMTPUTF8: a local part outside ASCII could not be sent to, so it is refused on both engines alike
      // (and ÜSER / üser can never be two contacts).
      for (const email of ['ÜSER@exämple.org', 'üser@exämple.org']) {
        assertError(
          await api.request('POST', '/v1/contacts', { body: { email } }),
          422,
          'invalid_address',
          `'${email}' is not an email address such as ada@example.org: has an invalid local part '${email.split('@')[0]}'.`,
          'email',
        );
      }
      assert.deepEqual(await api.rowCounts(), before, 'nothing stored');
      // Gone again: the list test after this one counts the project's contacts.
      assert.equal((await api.request('DELETE', `/v1/contacts/${ida.id}`)).status, 200);
    });

    test('updates by id or email: only what is sent, null removes a value; deletes by email', async () => {
      const bob = await created('/v1/contacts', {
        email: 'bob@example.org',
        last_name: 'Stone',
        properties: { plan: 'team', seats: 2 },
      });
      const changed = await api.request('PATCH', '/v1/contacts/BOB@example.org', {
        body: { first_name: 'Bob', unsubscribed: true, properties: { seats: null, plan: 'pro' } },
      });
      assert.equal(changed.status, 200, JSON.stringify(changed.body));
      assert.ok(changed.body.updated_at > bob.updated_at);
      assert.deepEqual(changed.body, {
        ...bob,
        first_name: 'Bob',
        unsubscribed: true,
        properties: { plan: 'pro' },
        updated_at: changed.body.updated_at,
      });
      const cleared = await api.request('PATCH', `/v1/contacts/${bob.id}`, { body: { last_name: null } });
      assert.equal(cleared.body.last_name, null);
      assert.equal(cleared.body.first_name, 'Bob');

      assertError(
        await api.request('PATCH', `/v1/contacts/${bob.id}`, { body: {} }),
        422,
        'parameter_missing',
        'Send at least one of first_name, last_name, unsubscribed, properties.',
      );
      assertError(
        await api.request('PATCH', `/v1/contacts/${bob.id}`, { body: { properties: { plan: 3 } } }),
        422,
        'property_type_mismatch',
        "'plan' is declared as a string property: properties.plan must be a string, not a number.",
        'properties.plan',
      );
      const deleted = await api.request('DELETE', '/v1/contacts/Bob@Example.org');
      assert.equal(deleted.status, 200);
      assert.deepEqual(deleted.body, { object: 'contact', id: bob.id, deleted: true });
      for (const method of ['GET', 'DELETE']) {
        assertError(
          await api.request(method, `/v1/contacts/${bob.id}`),
          404,
          'resource_missing',
          `No contact with id '${bob.id}'.`,
          'id',
        );
      }
      assertError(
        await api.request('PATCH', '/v1/contacts/bob@example.org', { body: { unsubscribed: false } }),
        404,
        'resource_missing',
        "No contact with id 'bob@example.org'.",
        'id',
      );
    });

    test('lists newest first with cursors and filters: unsubscribed, email prefix, a property', async () => {
      for (const [email, plan, seats, unsubscribed] of [
        ['carol@acme.example', 'pro', 3, false],
        ['dave@acme.example', 'free', 3, true],
        ['erin@other.example', 'pro', 10, false],
        ['a_b@x.example', 'pro', 1, false],
      ] as const) {
        await created('/v1/contacts', { email, unsubscribed, properties: { plan, seats } });
      }
      const emails = async (query: string) => {
        const response = await api.request('GET', `/v1/contacts${query}`);
        assert.equal(response.status, 200, JSON.stringify(response.body));
        return response.body.data.map((contact: any) => contact.email);
      };
      assert.deepEqual(await emails(''), [
        'a_b@x.example',
        'erin@other.example',
        'dave@acme.example',
        'carol@acme.example',
        'ada@example.org',
      ]);
      const first = await api.request('GET', '/v1/contacts?limit=2');
      assert.equal(first.body.has_more, true);
      assert.deepEqual(await emails(`?limit=2&after=${first.body.data[1].id}`), [
        'dave@acme.example',
        'carol@acme.example',
      ]);
      assert.deepEqual(await emails('?unsubscribed=true'), ['dave@acme.example']);
      assert.deepEqual(await emails('?email_prefix=DAVE'), ['dave@acme.example']);
      // `_` is a letter here, not LIKE's wildcard.
      assert.deepEqual(await emails('?email_prefix=a_'), ['a_b@x.example']);
      assert.deepEqual(await emails('?property=plan:pro&unsubscribed=false'), [
        'a_b@x.example',
        'erin@other.example',
        'carol@acme.example',
        'ada@example.org',
      ]);
      assert.deepEqual(await emails('?property=seats:3'), ['dave@acme.example', 'carol@acme.example']);
      assert.deepEqual(await emails('?property=seats:10&email_prefix=erin'), ['erin@other.example']);
      assertError(
        await api.request('GET', '/v1/contacts?property=seats:many'),
        422,
        'property_type_mismatch',
        "'seats' is a number property: 'many' is not a number.",
        'property',
      );
      assertError(
        await api.request('GET', '/v1/contacts?property=tier:gold'),
        422,
        'property_undeclared',
        "'tier' is not a declared contact property.",
        'property',
      );
      assertError(
        await api.request('GET', '/v1/contacts?after=cprop_01'),
        422,
        'parameter_invalid',
        'after must be an id from this list (con_…).',
        'after',
      );
    });

    test('a deleted property leaves contacts; declared again, the old values do not come back', async () => {
      const deleted = await api.request('DELETE', '/v1/contact-properties/seats');
      assert.equal(deleted.status, 200);
      assert.equal(deleted.body.deleted, true);
      const ada = await api.request('GET', '/v1/contacts/ada@example.org');
      assert.deepEqual(ada.body.properties, { plan: 'pro' });
      await created('/v1/contact-properties', { key: 'seats', type: 'string' });
      assert.deepEqual((await api.request('GET', '/v1/contacts/ada@example.org')).body.properties, {
        plan: 'pro',
      });
      assert.deepEqual(
        await api.request('GET', '/v1/contacts?property=seats:5').then((r) => r.body.data),
        [],
      );
    });
  });
}
