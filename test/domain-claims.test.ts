import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { migrateToLatest } from '../src/db/migrate.ts';
import { createSecretBox } from '../src/lib/crypto.ts';
import { createDns } from '../src/lib/dns.ts';
import {
  createDomainService,
  type DomainService,
  type DomainSettings,
} from '../src/modules/domains/domains.service.ts';
import {
  createTestDatabase,
  ALL_ENGINES,
  engineSkip,
  startTestApp,
  TEST_ENCRYPTION_KEY,
  type TestApp,
} from './helpers/app.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { createDomainRepo } from '../src/modules/domains/domains.repo.ts';

// Who holds a domain name: whoever proves control of it. A pending domain blocks nobody; the first project to
// verify a name holds it; another project takes it over only with its own challenge record published
// (`_postwire-challenge.<name>` TXT `postwire-verification=<token>`), and the previous holder's domain fails
// (`domain.failed`) and stops signing. Under a name another project holds, a subdomain needs the challenge
// too; a subdomain another project holds does not stand in the way of its parent.

const SETTINGS: DomainSettings = {
  returnPath: { mxHost: 'inbound.postwire.test', spf: 'v=spf1 ip4:192.0.2.10 -all' },
  recheckMs: 6 * 3_600_000,
  senderDomains: 'any',
  bounceDomain: 'bounces.postwire.test',
};

type Project = { projectId: string; key: string };

for (const engine of ALL_ENGINES) {
  describe(`who holds a domain name (${engine})`, { skip: engineSkip(engine) }, () => {
    let dns: TestDnsServer;
    let api: TestApp;
    let domains: DomainService;

    before(async () => {
      dns = await startDnsServer();
      const resolver = createDns({ servers: [dns.address] });
      api = await startTestApp(engine, {
        allowPrivateUrls: true,
        worker: true,
        dns: resolver,
        domains: SETTINGS,
      });
      // The service as a sending worker builds it (src/workers.ts): what it signs queued mail with.
      domains = createDomainService({
        db: api.database.handle.db,
        repo: createDomainRepo(api.database.handle.db, engine),
        clock: { now: () => new Date() },
        secretBox: createSecretBox(TEST_ENCRYPTION_KEY),
        dns: resolver,
        events: api.events,
        settings: SETTINGS,
      });
    });
    after(async () => {
      await api.close();
      await dns.close();
    });

    const add = async (project: Project, name: string) => {
      const created = await api.request('POST', '/v1/domains', { body: { name }, key: project.key });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      return created.body;
    };
    const verify = async (project: Project, id: string) => {
      const checked = await api.request('POST', `/v1/domains/${id}/verify`, { key: project.key });
      assert.equal(checked.status, 200, JSON.stringify(checked.body));
      return checked.body;
    };
    const get = async (project: Project, id: string) =>
      (await api.request('GET', `/v1/domains/${id}`, { key: project.key })).body;
    const record = (domain: any, purpose: string) =>
      domain.records.find((entry: any) => entry.purpose === purpose);
    /** Publishes records as the name's owner would (each TXT replaces what its name held). */
    const publish = (...records: any[]) => {
      for (const entry of records) {
        if (entry.type === 'MX') {
          dns.set(entry.name, 'MX', [{ type: 'MX', exchange: entry.value, priority: entry.priority }]);
        } else dns.set(entry.name, 'TXT', [{ type: 'TXT', text: entry.value }]);
      }
    };
    /** Every record the domain asks for except DMARC (a suggestion) and the challenge. */
    const publishOwnRecords = (domain: any) =>
      publish(...domain.records.filter((entry: any) => !['dmarc', 'challenge'].includes(entry.purpose)));
    /** The project's domain events about `name`, oldest first (events are written with the change). */
    const domainEvents = async (project: Project, name: string) => {
      const listed = await api.request('GET', '/v1/events?limit=100', { key: project.key });
      assert.equal(listed.status, 200);
      return listed.body.data
        .filter((event: any) => event.type.startsWith('domain.') && event.data.name === name)
        .reverse()
        .map((event: any) => [event.type, event.data.previous_status, event.data.status]);
    };
    const send = (project: Project, from: string) =>
      api.request('POST', '/v1/emails', {
        key: project.key,
        body: { from, to: 'ada@receiver.test', subject: 'Hi', text: 'hi' },
      });

    test('a pending domain blocks nobody: the owner adds and verifies the name a squatter added first', async () => {
      const squatter = await api.createProject('Squatter');
      const owner = await api.createProject('Victim Corp');
      const squatted = await add(squatter, 'victim-corp.example');
      assert.equal(squatted.status, 'pending');
      assert.equal(squatted.challenge_required, false, 'nobody holds the name');
      assert.equal(record(squatted, 'challenge'), undefined);

      const own = await add(owner, 'victim-corp.example');
      assert.notEqual(own.id, squatted.id);
      assert.notEqual(own.dkim_selector, squatted.dkim_selector, 'each project has its own key');
      assert.equal(own.challenge_required, false);
      publishOwnRecords(own);
      const verified = await verify(owner, own.id);
      assert.equal(verified.status, 'verified', JSON.stringify(verified.records));
      assert.equal(verified.challenge_required, false);
      assert.deepEqual(await domainEvents(owner, 'victim-corp.example'), [
        ['domain.verified', 'pending', 'verified'],
      ]);

      // The squatter now sees that another project holds it, and which record it would need to publish.
      const seen = await get(squatter, squatted.id);
      assert.equal(seen.status, 'pending');
      assert.equal(seen.challenge_required, true);
      const challenge = seen.records[0];
      assert.equal(challenge.purpose, 'challenge');
      assert.deepEqual(
        [challenge.type, challenge.name, challenge.required],
        ['TXT', '_postwire-challenge.victim-corp.example', true],
      );
      assert.match(challenge.value, /^postwire-verification=[A-Za-z0-9_-]{20,}$/);
      const listed = await api.request('GET', '/v1/domains', { key: squatter.key });
      assert.equal(listed.body.data[0].challenge_required, true, 'the list says so too');

      // Even with its DKIM record in the zone (as if published for it), no challenge: not verified.
      publishOwnRecords(squatted);
      const refused = await verify(squatter, squatted.id);
      assert.equal(refused.status, 'pending', JSON.stringify(refused.records));
      assert.equal(record(refused, 'dkim').status, 'verified');
      assert.equal(record(refused, 'challenge').status, 'pending');
      assert.equal((await get(owner, own.id)).status, 'verified', 'the holder keeps it');

      const spoof = await send(squatter, 'ceo@victim-corp.example');
      assert.equal(spoof.status, 422);
      assert.equal(spoof.body.error.code, 'sender_domain_not_allowed');
      assert.equal((await send(owner, 'ceo@victim-corp.example')).status, 202);
      assert.deepEqual(await domainEvents(squatter, 'victim-corp.example'), [], 'nothing changed for it');

      // A project still cannot add a name twice.
      const twice = await api.request('POST', '/v1/domains', {
        body: { name: 'Victim-Corp.example.' },
        key: owner.key,
      });
      assert.equal(twice.status, 409);
      assert.equal(twice.body.error.code, 'domain_exists');
      assert.equal(twice.body.error.param, 'name');
    });

    test('take-over by proof: the challenge moves the name; the old holder fails, is told and stops signing', async () => {
      const before = await api.createProject('Old holder');
      const next = await api.createProject('New holder');
      const receiver: Receiver = await startReceiver();
      try {
        const webhook = await api.request('POST', '/v1/webhooks', {
          key: before.key,
          body: { url: receiver.url, events: ['domain.verified', 'domain.failed'] },
        });
        assert.equal(webhook.status, 201, JSON.stringify(webhook.body));
        const old = await add(before, 'moving.example');
        publishOwnRecords(old);
        assert.equal((await verify(before, old.id)).status, 'verified');
        const accepted = await send(before, 'hello@moving.example');
        assert.equal(accepted.status, 202);
        const queued = await api.request('GET', `/v1/emails/${accepted.body.id}`, { key: before.key });
        assert.equal(queued.body.authentication.dkim_domain, 'moving.example');
        const signing = await domains.signingFor(before.projectId, {
          dkimDomain: 'moving.example',
          returnPathDomain: 'bounces.moving.example',
        });
        assert.equal(signing.dkim?.selector, old.dkim_selector);

        const taker = await add(next, 'moving.example');
        assert.equal(taker.challenge_required, true);
        publishOwnRecords(taker);
        const waiting = await verify(next, taker.id);
        assert.equal(waiting.status, 'pending', 'its DKIM alone does not move the name');

        // Two projects' tokens at once: neither takes the name from the other.
        const challenge = record(taker, 'challenge');
        dns.set(challenge.name, 'TXT', [
          { type: 'TXT', text: challenge.value },
          { type: 'TXT', text: 'postwire-verification=someone-elses-token' },
        ]);
        const ambiguous = await verify(next, taker.id);
        assert.equal(ambiguous.status, 'failed');
        assert.equal(record(ambiguous, 'challenge').found.length, 2);
        assert.equal((await get(before, old.id)).status, 'verified');

        // Only its token, with other TXT records at the name: it takes the name over.
        dns.set(challenge.name, 'TXT', [
          { type: 'TXT', text: 'unrelated=1' },
          { type: 'TXT', text: challenge.value },
        ]);
        const taken = await verify(next, taker.id);
        assert.equal(taken.status, 'verified', JSON.stringify(taken.records));
        assert.equal(taken.challenge_required, false);
        assert.equal(record(taken, 'challenge'), undefined, 'not needed once it holds the name');

        const lost = await get(before, old.id);
        assert.equal(lost.status, 'failed');
        assert.equal(lost.challenge_required, true);
        assert.equal(record(lost, 'dkim').status, 'verified', 'its own records still match');
        assert.deepEqual(await domainEvents(before, 'moving.example'), [
          ['domain.verified', 'pending', 'verified'],
          ['domain.failed', 'verified', 'failed'],
        ]);
        assert.deepEqual(await domainEvents(next, 'moving.example'), [
          ['domain.failed', 'pending', 'failed'],
          ['domain.verified', 'failed', 'verified'],
        ]);

        // The webhook hears it, with what it needs to take the name back.
        const delivered = (await receiver.waitFor(2, 5000)).map((request) => JSON.parse(request.body));
        const failed = delivered.find((event) => event.type === 'domain.failed')!;
        assert.equal(failed.data.domain_id, old.id);
        assert.equal(failed.data.previous_status, 'verified');
        assert.equal(failed.data.challenge_required, true);
        assert.equal(failed.data.records[0].purpose, 'challenge');
        assert.equal(failed.data.records[0].name, '_postwire-challenge.moving.example');
        assert.notEqual(failed.data.records[0].value, challenge.value, "the old holder's own token");

        // It signs nothing more: queued mail goes out with the operator's key, new mail is refused.
        assert.deepEqual(
          await domains.signingFor(before.projectId, {
            dkimDomain: 'moving.example',
            returnPathDomain: 'bounces.moving.example',
          }),
          {},
        );
        const refused = await send(before, 'hello@moving.example');
        assert.equal(refused.status, 422);
        assert.equal(refused.body.error.code, 'sender_domain_not_allowed');
        const sent = await send(next, 'hello@moving.example');
        assert.equal(sent.status, 202, JSON.stringify(sent.body));
        const signed = await domains.signingFor(next.projectId, {
          dkimDomain: 'moving.example',
          returnPathDomain: 'bounces.moving.example',
        });
        assert.equal(signed.dkim?.selector, taker.dkim_selector);

        // Its records still published, the old holder looking again changes nothing (no flip-flop).
        const again = await verify(before, old.id);
        assert.equal(again.status, 'failed');
        assert.equal(record(again, 'challenge').status, 'failed', "the taker's token is found");
        assert.equal((await get(next, taker.id)).status, 'verified');
        assert.equal((await domainEvents(before, 'moving.example')).length, 2, 'no event without a change');

        // The owner moves it back by publishing the old holder's token instead.
        publish(record(again, 'challenge'));
        const back = await verify(before, old.id);
        assert.equal(back.status, 'verified');
        assert.equal((await get(next, taker.id)).status, 'failed');
        assert.deepEqual((await domainEvents(next, 'moving.example')).at(-1), [
          'domain.failed',
          'verified',
          'failed',
        ]);
      } finally {
        await receiver.close();
      }
    });

    test('a subdomain of a name another project holds needs the challenge at the subdomain', async () => {
      const parent = await api.createProject('Parent owner');
      const other = await api.createProject('Subdomain taker');
      const acme = await add(parent, 'acme-claims.example');
      publishOwnRecords(acme);
      assert.equal((await verify(parent, acme.id)).status, 'verified');

      const sub = await add(other, 'sub.acme-claims.example');
      assert.equal(sub.challenge_required, true);
      const challenge = record(sub, 'challenge');
      assert.equal(challenge.name, '_postwire-challenge.sub.acme-claims.example');
      publishOwnRecords(sub);
      assert.equal((await verify(other, sub.id)).status, 'pending');
      // Its token at the parent's name does not count for the subdomain.
      dns.set('_postwire-challenge.acme-claims.example', 'TXT', [{ type: 'TXT', text: challenge.value }]);
      assert.equal((await verify(other, sub.id)).status, 'pending');
      assert.equal((await send(other, 'news@sub.acme-claims.example')).status, 422);

      publish(challenge);
      const verified = await verify(other, sub.id);
      assert.equal(verified.status, 'verified', JSON.stringify(verified.records));
      // The parent stays with its holder, who is told nothing: the subdomain, more specific, is the other's.
      assert.equal((await get(parent, acme.id)).status, 'verified');
      assert.deepEqual(await domainEvents(parent, 'acme-claims.example'), [
        ['domain.verified', 'pending', 'verified'],
      ]);
      assert.equal((await send(other, 'news@sub.acme-claims.example')).status, 202);
      assert.equal((await send(other, 'news@deep.sub.acme-claims.example')).status, 202);
      assert.equal((await send(parent, 'hello@acme-claims.example')).status, 202);
      assert.equal((await send(parent, 'hello@sub.acme-claims.example')).status, 422);
      assert.equal((await send(other, 'hello@acme-claims.example')).status, 422);
    });

    test("a subdomain another project holds does not stand in the way of its parent's owner", async () => {
      const team = await api.createProject('Team');
      const owner = await api.createProject('Owner');
      const sub = await add(team, 'team.parent-claims.example');
      publishOwnRecords(sub);
      assert.equal((await verify(team, sub.id)).status, 'verified');

      const parent = await add(owner, 'parent-claims.example');
      assert.equal(parent.challenge_required, false);
      publishOwnRecords(parent);
      const verified = await verify(owner, parent.id);
      assert.equal(verified.status, 'verified', JSON.stringify(verified.records));
      // Both hold their names; the subdomain stays with its holder, also when looked at again.
      assert.equal((await verify(team, sub.id)).status, 'verified');
      assert.equal((await get(team, sub.id)).challenge_required, false);
      assert.equal((await send(owner, 'hello@parent-claims.example')).status, 202);
      assert.equal((await send(team, 'hello@team.parent-claims.example')).status, 202);
      assert.equal((await send(owner, 'hello@team.parent-claims.example')).status, 422);
    });

    test('two projects verifying one name at once: one holds it, the other needs its challenge', async () => {
      const first = await api.createProject('Racer A');
      const second = await api.createProject('Racer B');
      const a = await add(first, 'race-claims.example');
      const b = await add(second, 'race-claims.example');
      publishOwnRecords(a);
      publish(record(b, 'dkim'));
      const answers = await Promise.all([verify(first, a.id), verify(second, b.id)]);
      assert.deepEqual(
        answers.map((answer) => answer.status).sort(),
        ['pending', 'verified'],
        JSON.stringify(answers),
      );
      const loser = answers.find((answer) => answer.status === 'pending')!;
      assert.equal(loser.challenge_required, true);
      const rows = await api.database.handle.db
        .selectFrom('domains')
        .select('status')
        .where('name', '=', 'race-claims.example')
        .execute();
      assert.deepEqual(rows.map((row) => row.status).sort(), ['pending', 'verified']);
    });

    test('deleting the holding domain frees the name: the next project verifies without a challenge', async () => {
      const holder = await api.createProject('Leaving');
      const next = await api.createProject('Arriving');
      const held = await add(holder, 'freed-claims.example');
      publishOwnRecords(held);
      assert.equal((await verify(holder, held.id)).status, 'verified');
      const waiting = await add(next, 'freed-claims.example');
      assert.equal(waiting.challenge_required, true);
      assert.equal((await api.request('DELETE', `/v1/domains/${held.id}`, { key: holder.key })).status, 200);
      assert.equal((await get(next, waiting.id)).challenge_required, false);
      publish(record(waiting, 'dkim'));
      assert.equal((await verify(next, waiting.id)).status, 'verified');
    });
  });
}

for (const engine of ALL_ENGINES) {
  test(
    `migration 0021 on a database that has domains (${engine})`,
    { skip: engineSkip(engine) },
    async (t) => {
      // The schema as the version before this one left it: the migrations up to 0020, recorded as applied.
      const database = await createTestDatabase(engine, { migrationsBefore: '0021' });
      t.after(() => database.drop());
      const db = database.handle.db as any;
      assert.equal(
        (await db.selectFrom('postwire_migrations').select('name').execute()).length,
        20,
        'the migrations before 0021',
      );
      const now = new Date().toISOString();
      await db
        .insertInto('projects')
        .values(['proj_a', 'proj_b'].map((id) => ({ id, name: id, is_default: false, created_at: now })))
        .execute();
      const domain = (id: string, projectId: string, name: string, status: string) => ({
        id,
        project_id: projectId,
        name,
        status,
        dkim_selector: `pw${id}`,
        dkim_public_key: 'KEY',
        dkim_private_key_sealed: 'SEALED',
        return_path_verified: false,
        next_check_at: now,
        created_at: now,
        updated_at: now,
      });
      await db
        .insertInto('domains')
        .values([
          domain('dom_1', 'proj_a', 'one.example', 'verified'),
          domain('dom_2', 'proj_a', 'two.example', 'pending'),
        ])
        .execute();
      const stamp = async () =>
        (
          await db
            .selectFrom('cache_stamps')
            .select('version')
            .where('scope', '=', 'domains')
            .executeTakeFirst()
        ).version;

      // 0021 first (later migrations follow it).
      assert.equal((await migrateToLatest(db))[0], '0021_domain_claims');
      const rows = await db.selectFrom('domains').selectAll().orderBy('id').execute();
      assert.deepEqual(
        rows.map((row: any) => [row.id, row.project_id, row.name, row.status, row.dkim_selector]),
        [
          ['dom_1', 'proj_a', 'one.example', 'verified', 'pwdom_1'],
          ['dom_2', 'proj_a', 'two.example', 'pending', 'pwdom_2'],
        ],
      );
      assert.ok(
        rows.every((row: any) => typeof row.challenge_token === 'string' && row.challenge_token.length >= 20),
      );
      assert.notEqual(rows[0].challenge_token, rows[1].challenge_token);

      // Another project may add a name now; a second verified one, or the same name twice in a project, not.
      await db
        .insertInto('domains')
        .values({ ...domain('dom_3', 'proj_b', 'one.example', 'pending'), challenge_token: 'x' })
        .execute();
      await assert.rejects(
        db.updateTable('domains').set({ status: 'verified' }).where('id', '=', 'dom_3').execute(),
        /unique|duplicate/i,
      );
      await assert.rejects(
        db
          .insertInto('domains')
          .values({ ...domain('dom_4', 'proj_a', 'two.example', 'pending'), challenge_token: 'y' })
          .execute(),
        /unique|duplicate/i,
      );
      // The domains' cache stamp still moves with a change of status (SQLite's triggers came with the new table).
      const before = await stamp();
      await db.updateTable('domains').set({ status: 'failed' }).where('id', '=', 'dom_1').execute();
      assert.notEqual(await stamp(), before);
      // And a project's deletion still takes its domains along.
      await db.deleteFrom('projects').where('id', '=', 'proj_b').execute();
      assert.equal(
        (await db.selectFrom('domains').select('id').where('project_id', '=', 'proj_b').execute()).length,
        0,
      );
    },
  );
}
