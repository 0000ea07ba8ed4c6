import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Resend } from 'resend';
import { assertResendError as assertError, dataOf } from './helpers/answers.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';

// Resend's SDK, unchanged, drives what was 501 at /resend and Postwire can answer: suppressions, receiving,
// attachments, key renames. Success and refusals, as Resend's shapes and errors.

for (const engine of ALL_ENGINES) {
  describe(
    `the resend SDK's remaining methods against /resend (${engine})`,
    { skip: engineSkip(engine) },
    () => {
      let api: TestApp;
      let resend: Resend;
      before(async () => {
        api = await startTestApp(engine);
        resend = new Resend(api.key, { baseUrl: `${api.baseUrl}/resend` });
      });
      after(() => api.close());

      const clientWith = async (permission: string) => {
        const made = await api.request('POST', '/v1/api-keys', { body: { name: permission, permission } });
        assert.equal(made.status, 201, JSON.stringify(made.body));
        return new Resend(made.body.token, { baseUrl: `${api.baseUrl}/resend` });
      };

      test('suppressions: add, get (by id or address), list (by origin), remove; batches; refusals', async () => {
        const ada = dataOf(await resend.suppressions.add({ email: 'Ada@Example.org' }));
        assert.deepEqual(Object.keys(ada), ['object', 'id']);
        assert.equal(ada.object, 'suppression');
        assert.match(ada.id, /^sup_/);
        // Adding an address already there answers its entry.
        assert.deepEqual(dataOf(await resend.suppressions.add({ email: 'ada@example.org' })), ada);

        const got = dataOf(await resend.suppressions.get(ada.id));
        assert.deepEqual(got, {
          object: 'suppression',
          id: ada.id,
          email: 'ada@example.org',
          origin: 'manual',
          source_id: null,
          created_at: got.created_at,
        });
        assert.deepEqual(dataOf(await resend.suppressions.get('ADA@example.org')), got);

        const batch = dataOf(
          await resend.suppressions.batch.add({ emails: ['bob@example.org', 'cy@example.org'] }),
        );
        assert.equal(batch.data.length, 2);
        const [bob, cy] = batch.data;
        assert.deepEqual(bob, { object: 'suppression', id: bob!.id });

        // Bounces and complaints add entries too: a complaint through /v1's event path is not needed here,
        // the list's filter is Postwire's reason.
        const listed = dataOf(await resend.suppressions.list());
        assert.deepEqual(
          listed.data.map((entry) => [entry.email, entry.origin]),
          [
            ['cy@example.org', 'manual'],
            ['bob@example.org', 'manual'],
            ['ada@example.org', 'manual'],
          ],
        );
        assert.equal(listed.has_more, false);
        assert.deepEqual(Object.keys(listed.data[0]!).sort(), [
          'created_at',
          'email',
          'id',
          'origin',
          'source_id',
        ]);
        const paged = dataOf(await resend.suppressions.list({ limit: 1, after: cy!.id }));
        assert.deepEqual(
          paged.data.map((entry) => entry.id),
          [bob!.id],
        );
        assert.equal(paged.has_more, true);
        assert.deepEqual(dataOf(await resend.suppressions.list({ origin: 'bounce' })).data, []);

        assert.deepEqual(dataOf(await resend.suppressions.remove('bob@example.org')), {
          object: 'suppression',
          id: bob!.id,
          deleted: true,
        });
        assertError(
          await resend.suppressions.get(bob!.id),
          404,
          'not_found',
          `No suppression with id '${bob!.id}'.`,
        );
        assertError(
          await resend.suppressions.remove('bob@example.org'),
          404,
          'not_found',
          "'bob@example.org' is not on the suppression list.",
        );
        assert.deepEqual(dataOf(await resend.suppressions.batch.remove({ ids: [cy!.id, ada.id] })), {
          data: [
            { object: 'suppression', id: cy!.id, deleted: true },
            { object: 'suppression', id: ada.id, deleted: true },
          ],
        });
        assert.deepEqual(dataOf(await resend.suppressions.list()).data, []);

        assertError(
          await resend.suppressions.add({ email: 'not an address' }),
          422,
          'validation_error',
          "'not an address' is not an email address such as a@example.com: is not of the form a@example.com.",
        );
        assertError(
          await resend.suppressions.add({} as { email: string }),
          422,
          'missing_required_field',
          "The field 'email' is required.",
        );
        // A read_only key reads and cannot write; a sending key does neither; another project sees nothing.
        const reader = await clientWith('read_only');
        const kept = dataOf(await resend.suppressions.add({ email: 'dee@example.org' }));
        assert.equal(dataOf(await reader.suppressions.get(kept.id)).email, 'dee@example.org');
        assertError(
          await reader.suppressions.add({ email: 'eve@example.org' }),
          403,
          'restricted_api_key',
          'This route needs a full_access key; this key is read_only.',
        );
        assertError(
          await reader.suppressions.remove(kept.id),
          403,
          'restricted_api_key',
          'This route needs a full_access key; this key is read_only.',
        );
        const sender = await clientWith('sending_access');
        assertError(
          await sender.suppressions.list(),
          403,
          'restricted_api_key',
          'This route needs a read_only key (or a full_access key); this key is sending_access.',
        );
        const other = await api.createProject('Other');
        const stranger = new Resend(other.key, { baseUrl: `${api.baseUrl}/resend` });
        assert.deepEqual(dataOf(await stranger.suppressions.list()).data, []);
        assertError(
          await stranger.suppressions.get(kept.id),
          404,
          'not_found',
          `No suppression with id '${kept.id}'.`,
        );
        assertError(
          await stranger.suppressions.remove('dee@example.org'),
          404,
          'not_found',
          "'dee@example.org' is not on the suppression list.",
        );
      });

      test('apiKeys.update renames a key; a revoked or unknown key is a 404; read_only cannot', async () => {
        const made = dataOf(await resend.apiKeys.create({ name: 'ci' }));
        assert.deepEqual(dataOf(await resend.apiKeys.update(made.id, { name: 'deploys' })), {
          object: 'api_key',
          id: made.id,
        });
        const listed = dataOf(await resend.apiKeys.list()).data.find((key) => key.id === made.id);
        assert.equal(listed?.name, 'deploys');
        // The key still works, with its permission.
        const renamed = new Resend(made.token, { baseUrl: `${api.baseUrl}/resend` });
        dataOf(await renamed.apiKeys.list());
        assertError(
          await resend.apiKeys.update(made.id, { name: '' }),
          422,
          'validation_error',
          "The field 'name' must not be empty.",
        );
        const reader = await clientWith('read_only');
        assertError(
          await reader.apiKeys.update(made.id, { name: 'x' }),
          403,
          'restricted_api_key',
          'This route needs a full_access key; this key is read_only.',
        );
        dataOf(await resend.apiKeys.remove(made.id));
        assertError(
          await resend.apiKeys.update(made.id, { name: 'again' }),
          404,
          'not_found',
          `No API key with id '${made.id}'.`,
        );
        const other = await api.createProject('Keys elsewhere');
        const stranger = new Resend(other.key, { baseUrl: `${api.baseUrl}/resend` });
        const theirs = dataOf(await stranger.apiKeys.create({ name: 'theirs' }));
        assertError(
          await resend.apiKeys.update(theirs.id, { name: 'mine' }),
          404,
          'not_found',
          `No API key with id '${theirs.id}'.`,
        );
      });

      test('domains.claims: create, get, verify over the takeover challenge; refusals', async () => {
        const claim = dataOf(await resend.domains.claims.create({ name: 'Claimed.example' }));
        const token = /^postwire-verification=([A-Za-z0-9_-]+)$/.exec(claim.record.value)?.[1];
        assert.ok(token, claim.record.value);
        // expires_at is null: the SDK types a string, Postwire's challenge does not expire.
        assert.deepEqual(claim as unknown, {
          object: 'domain_claim',
          id: claim.id,
          name: 'claimed.example',
          status: 'pending',
          domain_id: claim.id,
          region: 'us-east-1',
          record: {
            type: 'TXT',
            name: '_postwire-challenge.claimed.example',
            value: `postwire-verification=${token}`,
            ttl: 'Auto',
          },
          blocked_reason: null,
          failure_reason: null,
          created_at: claim.created_at,
          expires_at: null,
        });
        assert.match(claim.id, /^dom_/);
        // The claim is the project's domain of that name.
        assert.equal(dataOf(await resend.domains.get(claim.id)).name, 'claimed.example');
        assert.deepEqual(dataOf(await resend.domains.claims.get(claim.id)), claim);
        const verified = dataOf(await resend.domains.claims.verify(claim.id));
        assert.equal(verified.id, claim.id);
        assert.ok(['pending', 'failed'].includes(verified.status), verified.status);

        assertError(
          await resend.domains.claims.create({ name: 'claimed.example' }),
          409,
          'invalid_parameter',
          (await api.request('POST', '/v1/domains', { body: { name: 'claimed.example' } })).body.error
            .message,
        );
        assertError(
          await resend.domains.claims.create({ name: 'not a name' }),
          422,
          'validation_error',
          (await api.request('POST', '/v1/domains', { body: { name: 'not a name' } })).body.error.message,
        );
        assertError(
          await resend.domains.claims.get('dom_01kb0000000000000000000000'),
          404,
          'not_found',
          "No domain with id 'dom_01kb0000000000000000000000'.",
        );
        const reader = await clientWith('read_only');
        assert.equal(dataOf(await reader.domains.claims.get(claim.id)).id, claim.id);
        assertError(
          await reader.domains.claims.create({ name: 'other.example' }),
          403,
          'restricted_api_key',
          'This route needs a full_access key; this key is read_only.',
        );
        assertError(
          await reader.domains.claims.verify(claim.id),
          403,
          'restricted_api_key',
          'This route needs a full_access key; this key is read_only.',
        );
        const other = await api.createProject('Claims elsewhere');
        const stranger = new Resend(other.key, { baseUrl: `${api.baseUrl}/resend` });
        assertError(
          await stranger.domains.claims.get(claim.id),
          404,
          'not_found',
          `No domain with id '${claim.id}'.`,
        );
      });
    },
  );
}
