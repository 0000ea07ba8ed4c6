import assert from 'node:assert/strict';
import { createPrivateKey, createPublicKey } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { createSecretBox } from '../src/lib/crypto.ts';
import { createDns } from '../src/lib/dns.ts';
import { createDomainService, type DomainSettings } from '../src/modules/domains/domains.service.ts';
import { createDomainCheckWorker } from '../src/modules/domains/domains.worker.ts';
import type { QueueWorker } from '../src/queue/runtime.ts';
import { ALL_ENGINES, engineSkip, startTestApp, TEST_ENCRYPTION_KEY, type TestApp } from './helpers/app.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { createDomainRepo } from '../src/modules/domains/domains.repo.ts';

const HOUR = 3_600_000;
const SETTINGS: DomainSettings = {
  returnPath: { mxHost: 'inbound.postwire.test', spf: 'v=spf1 ip4:192.0.2.10 -all' },
  recheckMs: 6 * HOUR,
  senderDomains: 'any',
  bounceDomain: 'bounces.postwire.test',
};

/** A clock the test moves: background checks fall due when it says so. */
function testClock() {
  let now = Date.parse('2026-11-23T12:00:00.000Z');
  return { now: () => new Date(now), advance: (ms: number) => void (now += ms) };
}

/** Publishes every record the API asks for, as a domain owner would. */
function publish(dns: TestDnsServer, records: any[], only?: (record: any) => boolean) {
  for (const record of records.filter(only ?? (() => true))) {
    if (record.type === 'MX') {
      dns.add(record.name, { type: 'MX', exchange: record.value, priority: record.priority });
    } else {
      dns.add(record.name, { type: 'TXT', text: record.value });
    }
  }
}

async function domainCount(api: TestApp): Promise<number> {
  const row = await api.database.handle.db
    .selectFrom('domains')
    .select((eb) => eb.fn.countAll<number | string>().as('count'))
    .executeTakeFirstOrThrow();
  return Number(row.count);
}

for (const engine of ALL_ENGINES) {
  describe(`sending domains (${engine})`, { skip: engineSkip(engine) }, () => {
    let dns: TestDnsServer;
    let receiver: Receiver;
    let api: TestApp;
    let checks: QueueWorker;
    const clock = testClock();

    /** The domain events the webhook received for a domain name, oldest first. */
    const eventsFor = (name: string) =>
      receiver.requests
        .map((request) => JSON.parse(request.body))
        .filter((event) => event.data.name === name)
        .sort((a, b) => (a.id < b.id ? -1 : 1));

    async function waitForEvents(name: string, count: number) {
      const deadline = Date.now() + 5000;
      while (eventsFor(name).length < count) {
        if (Date.now() > deadline) throw new Error(`expected ${count} events for ${name}`);
        await receiver.waitFor(receiver.requests.length + 1, 5000);
      }
      return eventsFor(name);
    }

    before(async () => {
      dns = await startDnsServer();
      receiver = await startReceiver();
      const resolver = createDns({ servers: [dns.address] });
      api = await startTestApp(engine, {
        allowPrivateUrls: true,
        worker: true,
        clock,
        dns: resolver,
        domains: SETTINGS,
      });
      const webhook = await api.request('POST', '/v1/webhooks', {
        body: { url: receiver.url, events: ['domain.verified', 'domain.failed'] },
      });
      assert.equal(webhook.status, 201, JSON.stringify(webhook.body));
      // The background check of a worker process: its own service on the same database, as workers.ts builds it.
      checks = createDomainCheckWorker({
        database: api.database.handle,
        clock,
        domains: createDomainService({
          db: api.database.handle.db,
          repo: createDomainRepo(api.database.handle.db, engine),
          clock,
          secretBox: createSecretBox(TEST_ENCRYPTION_KEY),
          dns: resolver,
          events: api.events,
          settings: SETTINGS,
        }),
        settings: { pollIntervalMs: 100 },
      });
      await checks.start();
    });
    after(async () => {
      await checks.stop();
      await api.close();
      await receiver.close();
      await dns.close();
    });

    test('a new domain has its own RSA 2048 key, sealed at rest, and lists the records to publish', async () => {
      const created = await api.request('POST', '/v1/domains', { body: { name: 'acme.example' } });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const domain = created.body;
      assert.equal(domain.object, 'domain');
      assert.match(domain.id, /^dom_/);
      assert.equal(domain.name, 'acme.example');
      assert.equal(domain.status, 'pending');
      assert.equal(domain.return_path_domain, 'bounces.acme.example');
      assert.doesNotMatch(JSON.stringify(domain), /PRIVATE/);
      const byPurpose = (purpose: string, type: string) =>
        domain.records.find((record: any) => record.purpose === purpose && record.type === type);
      const dkim = byPurpose('dkim', 'TXT');
      assert.equal(dkim.name, `${domain.dkim_selector}._domainkey.acme.example`);
      assert.equal(dkim.required, true);
      assert.equal(dkim.status, 'pending');
      assert.equal('found' in dkim, false, 'nothing looked up yet');
      const publicKey = /^v=DKIM1; k=rsa; p=([A-Za-z0-9+/=]+)$/.exec(dkim.value)![1]!;
      const key = createPublicKey({ key: Buffer.from(publicKey, 'base64'), format: 'der', type: 'spki' });
      assert.equal(key.asymmetricKeyDetails?.modulusLength, 2048);
      assert.deepEqual(
        { name: byPurpose('return_path', 'MX').name, value: byPurpose('return_path', 'MX').value },
        { name: 'bounces.acme.example', value: 'inbound.postwire.test' },
      );
      assert.equal(byPurpose('return_path', 'MX').priority, 10);
      assert.equal(byPurpose('return_path', 'TXT').value, 'v=spf1 ip4:192.0.2.10 -all');
      assert.equal(byPurpose('dmarc', 'TXT').name, '_dmarc.acme.example');
      assert.equal(byPurpose('dmarc', 'TXT').required, false);

      // At rest, the private key is sealed; opened with the server's key, it is the pair of the published one.
      const row = await api.database.handle.db
        .selectFrom('domains')
        .selectAll()
        .where('id', '=', domain.id)
        .executeTakeFirstOrThrow();
      assert.doesNotMatch(row.dkim_private_key_sealed, /BEGIN|PRIVATE/);
      const pem = createSecretBox(TEST_ENCRYPTION_KEY).open(row.dkim_private_key_sealed);
      const derived = createPublicKey(createPrivateKey(pem)).export({ type: 'spki', format: 'der' });
      assert.equal(derived.toString('base64'), publicKey);

      for (const path of [`/v1/domains/${domain.id}`, '/v1/domains/ACME.example.']) {
        const got = await api.request('GET', path);
        assert.equal(got.status, 200, path);
        assert.equal(got.body.id, domain.id);
      }
      const listed = await api.request('GET', '/v1/domains');
      assert.ok(listed.body.data.some((entry: any) => entry.id === domain.id));
      // Another project sees nothing of it.
      const other = await api.createProject('Other');
      for (const path of [`/v1/domains/${domain.id}`, '/v1/domains/acme.example']) {
        assert.equal((await api.request('GET', path, { key: other.key })).status, 404);
      }
      assert.deepEqual((await api.request('GET', '/v1/domains', { key: other.key })).body.data, []);
      assert.equal((await api.request('DELETE', `/v1/domains/${domain.id}`, { key: other.key })).status, 404);
    });

    test('names that are not domains are refused (422) and nothing is stored', async () => {
      const before = await domainCount(api);
      for (const name of [
        'not a domain',
        'localhost',
        '192.0.2.1',
        'double..dot.example',
        '-leading.example',
        'under_score.example',
        'https://acme.example',
        'ada@acme.example',
        `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(63)}.example`,
        'a'.repeat(300),
        'trailing.dots.example..',
        '',
      ]) {
        const response = await api.request('POST', '/v1/domains', { body: { name } });
        assert.equal(response.status, 422, `${name}: ${JSON.stringify(response.body)}`);
        assert.equal(response.body.error.param, 'name');
        if (name.length > 0) assert.equal(response.body.error.code, 'invalid_domain', name);
      }
      const long = await api.request('POST', '/v1/domains', { body: { name: 'a'.repeat(300) } });
      assert.match(long.body.error.message, /300 characters long; a domain name has at most 253/);
      assert.equal(await domainCount(api), before);
    });

    test('IDN names are kept in punycode; a trailing dot is dropped; a name is once in a project', async () => {
      const idn = await api.request('POST', '/v1/domains', { body: { name: 'Bücher.Example' } });
      assert.equal(idn.status, 201, JSON.stringify(idn.body));
      assert.equal(idn.body.name, 'xn--bcher-kva.example');
      assert.equal((await api.request('GET', '/v1/domains/bücher.example')).body.id, idn.body.id);

      const dotted = await api.request('POST', '/v1/domains', { body: { name: 'shop.acme.example.' } });
      assert.equal(dotted.status, 201);
      assert.equal(dotted.body.name, 'shop.acme.example');

      const count = await domainCount(api);
      const again = await api.request('POST', '/v1/domains', { body: { name: 'SHOP.acme.example' } });
      assert.equal(again.status, 409);
      assert.equal(again.body.error.code, 'domain_exists');
      assert.equal(again.body.error.param, 'name');
      assert.equal(await domainCount(api), count, 'nothing stored');
      // Another project may add it too: a pending domain holds nothing (domain-claims.test.ts).
      const other = await api.createProject('Rival');
      const rival = await api.request('POST', '/v1/domains', {
        body: { name: 'shop.acme.example' },
        key: other.key,
      });
      assert.equal(rival.status, 201, JSON.stringify(rival.body));
      assert.notEqual(rival.body.id, dotted.body.id);

      const deleted = await api.request('DELETE', `/v1/domains/${dotted.body.id}`);
      assert.deepEqual(deleted.body, { object: 'domain', id: dotted.body.id, deleted: true });
      assert.equal((await api.request('GET', `/v1/domains/${dotted.body.id}`)).status, 404);
      assert.equal(
        (await api.request('GET', `/v1/domains/${rival.body.id}`, { key: other.key })).status,
        200,
      );
    });

    test('one project adding one name twice at once: one gets it, the other a 409 (in idempotent requests too)', async () => {
      const racer = await api.createProject('Racer');
      const answers = await Promise.all(
        [0, 1].map((index) =>
          api.request('POST', '/v1/domains', {
            key: racer.key,
            body: { name: 'race.example' },
            headers: { 'idempotency-key': `race-${index}` },
          }),
        ),
      );
      assert.deepEqual(
        answers.map((answer) => answer.status).sort(),
        [201, 409],
        JSON.stringify(answers.map((a) => a.body)),
      );
      const refused = answers.find((answer) => answer.status === 409)!;
      assert.equal(refused.body.error.code, 'domain_exists');
      // Another project adding it at the same time is no conflict at all.
      const other = await api.createProject('Racer elsewhere');
      const elsewhere = await api.request('POST', '/v1/domains', {
        key: other.key,
        body: { name: 'race.example' },
      });
      assert.equal(elsewhere.status, 201);
    });

    test('verify: nothing published → pending; published → verified (event); another key → failed (event)', async () => {
      const created = await api.request('POST', '/v1/domains', { body: { name: 'verify.example' } });
      const id = created.body.id;

      const missing = await api.request('POST', `/v1/domains/${id}/verify`);
      assert.equal(missing.status, 200, JSON.stringify(missing.body));
      assert.equal(missing.body.status, 'pending');
      for (const record of missing.body.records) {
        assert.equal(record.found, null, record.name);
        assert.equal(record.matches, false);
        assert.equal(record.status, 'pending');
      }
      assert.ok(missing.body.last_checked_at);

      publish(dns, created.body.records, (record) => record.purpose !== 'dmarc');
      const verified = await api.request('POST', `/v1/domains/${id}/verify`);
      assert.equal(verified.body.status, 'verified', JSON.stringify(verified.body.records));
      assert.equal(verified.body.return_path_verified, true);
      assert.ok(verified.body.verified_at);
      const dkim = verified.body.records.find((record: any) => record.purpose === 'dkim');
      assert.deepEqual(
        { status: dkim.status, matches: dkim.matches, found: dkim.found },
        { status: 'verified', matches: true, found: [dkim.value] },
      );
      const dmarc = verified.body.records.find((record: any) => record.purpose === 'dmarc');
      assert.equal(dmarc.status, 'pending', 'DMARC is a suggestion: not published, still verified');

      const [event] = await waitForEvents('verify.example', 1);
      assert.equal(event.type, 'domain.verified');
      assert.equal(event.data.domain_id, id);
      assert.equal(event.data.previous_status, 'pending');

      // Verifying again changes nothing and says nothing.
      assert.equal((await api.request('POST', `/v1/domains/${id}/verify`)).body.status, 'verified');

      const wrong = 'v=DKIM1; k=rsa; p=MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAwrong';
      dns.set(dkim.name, 'TXT', [{ type: 'TXT', text: wrong }]);
      const failed = await api.request('POST', `/v1/domains/verify.example/verify`);
      assert.equal(failed.body.status, 'failed');
      const found = failed.body.records.find((record: any) => record.purpose === 'dkim');
      assert.deepEqual(
        { status: found.status, matches: found.matches, found: found.found },
        { status: 'failed', matches: false, found: [wrong] },
      );
      const events = await waitForEvents('verify.example', 2);
      assert.deepEqual(
        events.map((entry) => [entry.type, entry.data.previous_status]),
        [
          ['domain.verified', 'pending'],
          ['domain.failed', 'verified'],
        ],
      );
      assert.equal(events.length, 2, 'one event per change');
    });

    test('a wrong DKIM value on a new domain fails it, saying what was found', async () => {
      const created = await api.request('POST', '/v1/domains', { body: { name: 'wrong.example' } });
      const dkim = created.body.records.find((record: any) => record.purpose === 'dkim');
      dns.add(dkim.name, { type: 'TXT', text: 'v=DKIM1; p=' });
      const failed = await api.request('POST', `/v1/domains/${created.body.id}/verify`);
      assert.equal(failed.body.status, 'failed');
      assert.deepEqual(failed.body.records[0].found, ['v=DKIM1; p=']);
      const [event] = await waitForEvents('wrong.example', 1);
      assert.equal(event.type, 'domain.failed');
    });

    test('a lookup that fails (SERVFAIL) decides nothing: a verified domain stays verified', async () => {
      const created = await api.request('POST', '/v1/domains', { body: { name: 'flaky.example' } });
      publish(dns, created.body.records);
      assert.equal(
        (await api.request('POST', `/v1/domains/${created.body.id}/verify`)).body.status,
        'verified',
      );
      const dkim = created.body.records.find((record: any) => record.purpose === 'dkim');
      dns.fail(dkim.name);
      try {
        const checked = await api.request('POST', `/v1/domains/${created.body.id}/verify`);
        assert.equal(checked.body.status, 'verified');
        assert.equal(checked.body.records[0].found, null);
        assert.equal(checked.body.records[0].error, 'ESERVFAIL');
      } finally {
        dns.fail(dkim.name, false);
      }
      await waitForEvents('flaky.example', 1);
      assert.deepEqual(
        eventsFor('flaky.example').map((event) => event.type),
        ['domain.verified'],
      );
    });

    test('isReturnPathDomain: bounces.<a domain some project holds>, for the inbound listener', async () => {
      const domains = createDomainService({
        db: api.database.handle.db,
        repo: createDomainRepo(api.database.handle.db, engine),
        clock,
        secretBox: createSecretBox(TEST_ENCRYPTION_KEY),
        dns: createDns({ servers: [dns.address] }),
        events: api.events,
        settings: SETTINGS,
      });
      await api.request('POST', '/v1/domains', { body: { name: 'listener.example' } });
      assert.equal(await domains.isReturnPathDomain('bounces.listener.example'), true);
      assert.equal(await domains.isReturnPathDomain('BOUNCES.Listener.example.'), true);
      assert.equal(await domains.isReturnPathDomain('listener.example'), false);
      assert.equal(await domains.isReturnPathDomain('bounces.unknown.example'), false);
      assert.equal(await domains.isReturnPathDomain('bounces.bounces.listener.example'), false);
    });

    test('the background check looks again every DOMAIN_RECHECK and emits the change', async () => {
      const created = await api.request('POST', '/v1/domains', { body: { name: 'recheck.example' } });
      const id = created.body.id;
      publish(dns, created.body.records);
      assert.equal((await api.request('POST', `/v1/domains/${id}/verify`)).body.status, 'verified');
      await waitForEvents('recheck.example', 1);

      // The records go away; nothing is looked at before the interval has passed.
      const dkim = created.body.records.find((record: any) => record.purpose === 'dkim');
      dns.remove(dkim.name);
      clock.advance(SETTINGS.recheckMs - 1000);
      await checks.whenIdle();
      assert.equal((await api.request('GET', `/v1/domains/${id}`)).body.status, 'verified');

      clock.advance(2000);
      await checks.whenIdle();
      const failed = await api.request('GET', `/v1/domains/${id}`);
      assert.equal(failed.body.status, 'failed');
      assert.equal(failed.body.records[0].found, null);
      const events = await waitForEvents('recheck.example', 2);
      assert.equal(events[1].type, 'domain.failed');

      // Published again: the next check verifies it again.
      publish(dns, [dkim]);
      clock.advance(SETTINGS.recheckMs + 1000);
      await checks.whenIdle();
      assert.equal((await api.request('GET', `/v1/domains/${id}`)).body.status, 'verified');
      const all = await waitForEvents('recheck.example', 3);
      assert.deepEqual(
        all.map((entry) => entry.type),
        ['domain.verified', 'domain.failed', 'domain.verified'],
      );
    });

    test('the background check takes a name over too, once another project publishes its challenge', async () => {
      const held = await api.request('POST', '/v1/domains', { body: { name: 'handover.example' } });
      publish(dns, held.body.records);
      assert.equal((await api.request('POST', `/v1/domains/${held.body.id}/verify`)).body.status, 'verified');
      await waitForEvents('handover.example', 1);

      const taker = await api.createProject('Taker');
      const added = await api.request('POST', '/v1/domains', {
        body: { name: 'handover.example' },
        key: taker.key,
      });
      assert.equal(added.body.challenge_required, true);
      // Its DKIM key and challenge; the return path's records are there already.
      publish(dns, added.body.records, (record) => ['dkim', 'challenge'].includes(record.purpose));
      clock.advance(SETTINGS.recheckMs + 1000);
      await checks.whenIdle();
      const taken = await api.request('GET', `/v1/domains/${added.body.id}`, { key: taker.key });
      assert.equal(taken.body.status, 'verified', JSON.stringify(taken.body.records));
      assert.equal((await api.request('GET', `/v1/domains/${held.body.id}`)).body.status, 'failed');
      const events = await waitForEvents('handover.example', 2);
      assert.deepEqual(
        events.map((event) => [event.type, event.data.domain_id, event.data.challenge_required]),
        [
          ['domain.verified', held.body.id, false],
          ['domain.failed', held.body.id, true],
        ],
      );
    });
  });
}
