import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { buildApp } from '../src/app.ts';
import {
  ALL_ENGINES,
  engineSkip,
  createTestDatabase,
  createTestServices,
  startTestApp,
  type TestApp,
} from './helpers/app.ts';

const email = (from = 'hello@acme.example') => ({
  from,
  to: 'someone@example.com',
  subject: 'Hi',
  text: 'Hello',
});

for (const engine of ALL_ENGINES) {
  describe(`API keys (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let domainId: string;
    let otherDomainId: string;
    before(async () => {
      api = await startTestApp(engine);
      const created = await api.request('POST', '/v1/domains', { body: { name: 'acme.example' } });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      domainId = created.body.id;
      const other = await api.request('POST', '/v1/domains', { body: { name: 'other.example' } });
      otherDomainId = other.body.id;
    });
    after(() => api.close());

    const createKey = async (body: Record<string, unknown>) => {
      const response = await api.request('POST', '/v1/api-keys', { body });
      assert.equal(response.status, 201, JSON.stringify(response.body));
      return response.body as Record<string, any> & { token: string; id: string };
    };
    const refused = (response: { status: number; headers: Headers; body: unknown }, message: string) => {
      assert.equal(response.status, 403, JSON.stringify(response.body));
      assert.deepEqual(response.body, {
        error: { code: 'insufficient_permission', message, request_id: response.headers.get('x-request-id') },
      });
    };

    test('a key is created with its permission, its token shown once and never listed', async () => {
      const before = Date.now();
      const key = await createKey({ name: 'ci', permission: 'read_only' });
      assert.match(key.token, /^pw_/);
      assert.equal(key.key_prefix, key.token.slice(0, 10));
      assert.ok(Date.parse(key.created_at) >= before - 1000);
      assert.deepEqual(
        { ...key, token: undefined, created_at: undefined },
        {
          object: 'api_key',
          id: key.id,
          name: 'ci',
          permission: 'read_only',
          domain_id: null,
          key_prefix: key.key_prefix,
          created_at: undefined,
          revoked_at: null,
          token: undefined,
        },
      );
      const defaulted = await createKey({ name: 'default scope' });
      assert.equal(defaulted.permission, 'full_access');

      const listed = await api.request('GET', '/v1/api-keys');
      assert.equal(listed.status, 200);
      assert.equal(listed.body.object, 'list');
      const text = JSON.stringify(listed.body);
      assert.ok(!text.includes(key.token) && !text.includes(defaulted.token), 'no token in the list');
      assert.ok(!/hash/.test(text));
      const { token: _token, ...view } = key;
      assert.deepEqual(
        listed.body.data.find((item: { id: string }) => item.id === key.id),
        view,
      );
      const one = await api.request('GET', `/v1/api-keys/${key.id}`);
      assert.deepEqual(one.body, view);
      const current = await api.request('GET', '/v1/api-keys/current', { key: key.token });
      assert.deepEqual(current.body, view);
    });

    test('each scope against a send, a read and a manage route', async () => {
      const keys = {
        full_access: (await createKey({ name: 'full', permission: 'full_access' })).token,
        sending_access: (await createKey({ name: 'send', permission: 'sending_access' })).token,
        read_only: (await createKey({ name: 'read', permission: 'read_only' })).token,
      };
      const hook = { url: 'https://hooks.example.com/h', events: ['email.sent'] };
      for (const [permission, key] of Object.entries(keys)) {
        const send = await api.request('POST', '/v1/emails', { key, body: email() });
        const read = await api.request('GET', '/v1/emails', { key });
        const manage = await api.request('POST', '/v1/webhooks', { key, body: hook });
        if (permission === 'full_access') {
          assert.deepEqual([send.status, read.status, manage.status], [202, 200, 201]);
        } else if (permission === 'sending_access') {
          assert.equal(send.status, 202, JSON.stringify(send.body));
          refused(
            read,
            'This route needs a read_only key (or a full_access key); this key is sending_access.',
          );
          refused(manage, 'This route needs a full_access key; this key is sending_access.');
        } else {
          refused(
            send,
            'This route needs a sending_access key (or a full_access key); this key is read_only.',
          );
          assert.equal(read.status, 200);
          refused(manage, 'This route needs a full_access key; this key is read_only.');
        }
      }
      // A read-only POST: the template preview.
      const template = await api.request('POST', '/v1/templates', {
        body: { name: 'welcome', subject: 'Hi {{name}}', text: 'Hello {{name}}' },
      });
      const preview = await api.request('POST', `/v1/templates/${template.body.id}/render`, {
        key: keys.read_only,
        body: { variables: { name: 'Ada' } },
      });
      assert.equal(preview.status, 200, JSON.stringify(preview.body));
      // Keys are managed only with full_access.
      refused(
        await api.request('POST', '/v1/api-keys', { key: keys.read_only, body: { name: 'x' } }),
        'This route needs a full_access key; this key is read_only.',
      );
    });

    test('a sending key limited to a domain sends from it (and its subdomains) and from no other', async () => {
      const key = await createKey({ name: 'acme only', permission: 'sending_access', domain_id: domainId });
      assert.equal(key.domain_id, domainId);
      for (const from of ['hello@acme.example', 'Acme <news@mail.acme.example>']) {
        const sent = await api.request('POST', '/v1/emails', { key: key.token, body: email(from) });
        assert.equal(sent.status, 202, JSON.stringify(sent.body));
      }
      const counts = await api.rowCounts();
      const other = await api.request('POST', '/v1/emails', {
        key: key.token,
        body: email('a@other.example'),
      });
      assert.equal(other.status, 403);
      assert.deepEqual(other.body, {
        error: {
          code: 'insufficient_permission',
          message: "This key may send only from the domain 'acme.example'; 'other.example' is not it.",
          param: 'from',
          request_id: other.headers.get('x-request-id'),
        },
      });
      const batch = await api.request('POST', '/v1/emails/batch', {
        key: key.token,
        body: [email(), email('b@other.example')],
      });
      assert.equal(batch.status, 403);
      assert.equal(batch.body.error.param, '[1].from');
      assert.deepEqual(await api.rowCounts(), counts, 'nothing stored');
      // Nor can it read emails or manage webhooks.
      assert.equal((await api.request('GET', '/v1/emails', { key: key.token })).status, 403);
      assert.equal((await api.request('GET', '/v1/webhooks', { key: key.token })).status, 403);
      assert.equal(
        (await api.request('DELETE', `/v1/domains/${otherDomainId}`, { key: key.token })).status,
        403,
      );
    });

    test('a revoked key is refused at once; the last full_access key cannot be revoked over the API', async () => {
      const key = await createKey({ name: 'short-lived', permission: 'read_only' });
      assert.equal((await api.request('GET', '/v1/emails', { key: key.token })).status, 200);
      const revoked = await api.request('DELETE', `/v1/api-keys/${key.id}`);
      assert.equal(revoked.status, 200);
      assert.deepEqual(revoked.body, { object: 'api_key', id: key.id, deleted: true });
      const after = await api.request('GET', '/v1/emails', { key: key.token });
      assert.equal(after.status, 401);
      assert.equal(after.body.error.message, 'Unknown or revoked API key.');
      const shown = await api.request('GET', `/v1/api-keys/${key.id}`);
      assert.match(shown.body.revoked_at, /^\d{4}-/);
      // Revoking again answers the same.
      assert.equal((await api.request('DELETE', `/v1/api-keys/${key.id}`)).status, 200);

      const { projectId, key: ownKey } = await api.createProject('Lonely');
      const listed = await api.request('GET', '/v1/api-keys', { key: ownKey });
      const [only] = listed.body.data;
      const last = await api.request('DELETE', `/v1/api-keys/${only.id}`, { key: ownKey });
      assert.equal(last.status, 409);
      assert.equal(last.body.error.code, 'last_full_access_key');
      assert.match(last.body.error.message, /last full_access key: create another full_access key first/);
      // With another full_access key, a key may revoke itself.
      const second = await api.request('POST', '/v1/api-keys', { key: ownKey, body: { name: 'second' } });
      const self = await api.request('DELETE', `/v1/api-keys/${only.id}`, { key: ownKey });
      assert.equal(self.status, 200);
      assert.equal((await api.request('GET', '/v1/api-keys', { key: ownKey })).status, 401);
      assert.equal((await api.request('GET', '/v1/api-keys', { key: second.body.token })).status, 200);
      assert.ok(projectId);
    });

    test("a project's last two full_access keys revoked at once: one is, the other stays", async () => {
      const { key: first } = await api.createProject('Pair');
      const second = (await api.request('POST', '/v1/api-keys', { key: first, body: { name: 'second' } }))
        .body;
      const firstId = (await api.request('GET', '/v1/api-keys/current', { key: first })).body.id;
      // Each key revokes the other, at the same time. One passes; the other is refused as the last
      // full_access key (409), or, where the first revocation commits before it is authenticated (SQLite's
      // one writer), as a revoked key (401).
      const answers = await Promise.all([
        api.request('DELETE', `/v1/api-keys/${second.id}`, { key: first }),
        api.request('DELETE', `/v1/api-keys/${firstId}`, { key: second.token }),
      ]);
      const statuses = answers.map((answer) => answer.status).sort();
      assert.equal(statuses[0], 200, JSON.stringify(statuses));
      assert.ok([401, 409].includes(statuses[1]!), JSON.stringify(statuses));
      const working = await Promise.all(
        [first, second.token].map(async (key) => (await api.request('GET', '/v1/api-keys', { key })).status),
      );
      assert.deepEqual(working.sort(), [200, 401]);
    });

    test("another project's keys and domains are not this project's", async () => {
      const other = await api.createProject('Other');
      const theirs = (await api.request('GET', '/v1/api-keys', { key: other.key })).body.data[0];
      assert.equal((await api.request('GET', `/v1/api-keys/${theirs.id}`)).status, 404);
      const missing = await api.request('DELETE', `/v1/api-keys/${theirs.id}`);
      assert.equal(missing.status, 404);
      assert.equal(missing.body.error.message, `No API key with id '${theirs.id}'.`);
      const foreign = await api.request('POST', '/v1/api-keys', {
        key: other.key,
        body: { name: 'x', permission: 'sending_access', domain_id: domainId },
      });
      assert.equal(foreign.status, 422);
      assert.deepEqual(foreign.body.error, {
        code: 'parameter_invalid',
        message: `No domain with id '${domainId}' in this project.`,
        param: 'domain_id',
        request_id: foreign.headers.get('x-request-id'),
      });
    });

    test('bad input: an unknown permission lists the allowed ones; a domain only on a sending key', async () => {
      const unknown = await api.request('POST', '/v1/api-keys', { body: { name: 'x', permission: 'admin' } });
      assert.equal(unknown.status, 422);
      assert.equal(unknown.body.error.param, 'permission');
      assert.equal(
        unknown.body.error.message,
        "The field 'permission' must be one of: full_access, sending_access, read_only.",
      );
      const nameless = await api.request('POST', '/v1/api-keys', { body: {} });
      assert.equal(nameless.status, 422);
      assert.equal(nameless.body.error.param, 'name');
      const domainOnRead = await api.request('POST', '/v1/api-keys', {
        body: { name: 'x', permission: 'read_only', domain_id: domainId },
      });
      assert.equal(domainOnRead.status, 422);
      assert.equal(
        domainOnRead.body.error.message,
        'Only a sending_access key can be limited to a domain; this key would be read_only.',
      );
    });
  });
}

describe('route permissions', () => {
  test('every route that is not public declares the permission it needs; an app with one that does not cannot start', async (t) => {
    const database = await createTestDatabase('sqlite');
    const services = createTestServices(database.handle);
    t.after(async () => {
      await services.close();
      await database.drop();
    });
    const app = await buildApp(services);
    await app.ready();
    const routes = app.routePermissions();
    await app.close();
    assert.ok(routes.length > 50, `${routes.length} routes seen`);
    assert.deepEqual(
      routes.filter((route) => !route.public && !route.permission),
      [],
      'routes without config.permission',
    );
    const declared = (method: string, url: string) =>
      routes.find((route) => route.method === method && route.url === url)?.permission;
    assert.equal(declared('POST', '/v1/emails'), 'sending_access');
    assert.equal(declared('POST', '/v1/emails/batch'), 'sending_access');
    assert.equal(declared('POST', '/v1/templates/:id/render'), 'read_only');
    assert.equal(declared('POST', '/v1/api-keys'), 'full_access');
    for (const route of routes.filter((route) => route.method === 'GET' && !route.public)) {
      assert.equal(route.permission, 'read_only', `GET ${route.url}`);
    }

    const forgetful = await buildApp(services);
    forgetful.get('/v1/forgotten', async () => ({}));
    await assert.rejects(
      async () => forgetful.ready(),
      /routes without config\.permission .*: GET \/v1\/forgotten/,
    );
    await forgetful.close().catch(() => {});
  });
});
