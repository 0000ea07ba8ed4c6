import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { Resolver } from 'node:dns/promises';
import { after, before, describe, test } from 'node:test';
import { authenticate } from 'mailauth';
import { type Config, loadConfig } from '../src/config.ts';
import { createSecretBox } from '../src/lib/crypto.ts';
import { createDns } from '../src/lib/dns.ts';
import { domainSettingsFromConfig } from '../src/modules/domains/domains.service.ts';
import { createReturnPath } from '../src/modules/emails/return-path.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import { ALL_ENGINES, engineSkip, startTestApp, TEST_ENCRYPTION_KEY, type TestApp } from './helpers/app.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';
import { until } from './helpers/until.ts';
import { startConfiguredSendingWorker } from './helpers/sending.ts';

// The operator's own key (DKIM_*): what signs mail from domains no project has verified.
const operatorKeys = generateKeyPairSync('rsa', { modulusLength: 2048 });
const OPERATOR_PEM = operatorKeys.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const OPERATOR_TXT = `v=DKIM1; k=rsa; p=${operatorKeys.publicKey.export({ type: 'spki', format: 'der' }).toString('base64')}`;

/** A project's domain, created, its records published on the test DNS server, and verified. */
async function verifiedDomain(api: TestApp, dns: TestDnsServer, name: string, key?: string) {
  const created = await api.request('POST', '/v1/domains', { body: { name }, key });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  for (const record of created.body.records) {
    if (record.type === 'MX') dns.add(record.name, { type: 'MX', exchange: record.value, priority: 10 });
    else dns.set(record.name, 'TXT', [{ type: 'TXT', text: record.value }]);
  }
  const verified = await api.request('POST', `/v1/domains/${created.body.id}/verify`, { key });
  assert.equal(verified.body.status, 'verified', JSON.stringify(verified.body.records));
  return verified.body;
}

/** mailauth's view of a received message, looking names up on the test DNS server. */
async function authenticated(dns: TestDnsServer, raw: string, sender: string) {
  const resolver = new Resolver();
  resolver.setServers([dns.address]);
  return authenticate(raw, {
    ip: '127.0.0.1',
    helo: 'postwire.test',
    sender,
    mta: 'mx.receiver.test',
    resolver: (name: string, type: string) => resolver.resolve(name, type as 'TXT'),
  });
}

function configFor(dns: TestDnsServer, smtp: TestSmtpServer, extra: Record<string, string> = {}): Config {
  return loadConfig({
    MAIL_TRANSPORT: 'relay',
    SMTP_URL: `smtp://127.0.0.1:${smtp.port}`,
    DNS_SERVERS: dns.address,
    BOUNCE_DOMAIN: 'bounces.postwire.test',
    INBOUND_MX_HOST: 'inbound.postwire.test',
    SENDING_SPF: 'v=spf1 ip4:127.0.0.1 -all',
    DKIM_DOMAIN: 'postwire-operator.test',
    DKIM_SELECTOR: 'op2026',
    DKIM_PRIVATE_KEY: OPERATOR_PEM,
    SEND_TIMEOUT: '3s',
    ...extra,
  });
}

for (const engine of ALL_ENGINES) {
  describe(`signing with a verified domain (${engine})`, { skip: engineSkip(engine) }, () => {
    let dns: TestDnsServer;
    let smtp: TestSmtpServer;
    let api: TestApp;
    let worker: SendingWorker;
    let config: Config;
    let resolver: ReturnType<typeof createDns>;

    // The sending worker as a worker process builds it (src/workers.ts), from the same configuration.
    const startSending = async () => {
      worker = await startConfiguredSendingWorker(api, config, resolver);
    };

    before(async () => {
      dns = await startDnsServer();
      smtp = await startSmtpServer();
      dns.add('op2026._domainkey.postwire-operator.test', { type: 'TXT', text: OPERATOR_TXT });
      config = configFor(dns, smtp);
      assert.equal(config.senderDomains, 'any', 'relay mode allows any From domain by default');
      resolver = createDns({ servers: config.dnsServers });
      api = await startTestApp(engine, {
        allowPrivateUrls: true,
        worker: true,
        dns: resolver,
        domains: domainSettingsFromConfig(config),
      });
      await startSending();
    });
    after(async () => {
      await worker.stop();
      await api.close();
      await smtp.close();
      await dns.close();
    });

    test('mail from a verified domain is signed d=<domain> (DKIM pass, DMARC aligned) and returns to its own subdomain', async () => {
      await verifiedDomain(api, dns, 'acme.example');
      dns.set('_dmarc.acme.example', 'TXT', [{ type: 'TXT', text: 'v=DMARC1; p=reject' }]);
      const sent = await api.request('POST', '/v1/emails', {
        body: { from: 'Acme <hello@acme.example>', to: 'ada@receiver.test', subject: 'Aligned', text: 'hi' },
      });
      assert.equal(sent.status, 202, JSON.stringify(sent.body));
      const [message] = await smtp.waitFor(1);

      // The envelope sender: the recipient's VERP address, on the domain's own return-path subdomain.
      const [local, domain] = message!.from.split('@');
      assert.equal(domain, 'bounces.acme.example');
      assert.match(local!, /^bounce\+/);
      const returnPath = createReturnPath({
        domain: config.bounceDomain!,
        secretBox: createSecretBox(TEST_ENCRYPTION_KEY),
      });
      assert.match(returnPath.recipientOf(message!.from) ?? '', /^rcpt_/);

      const result = await authenticated(dns, message!.raw, message!.from);
      const signatures = result.dkim.results.map((entry: any) => ({
        domain: entry.signingDomain,
        result: entry.status.result,
      }));
      assert.deepEqual(signatures, [{ domain: 'acme.example', result: 'pass' }]);
      assert.ok(result.spf && result.dmarc);
      assert.equal(result.spf.status.result, 'pass', 'the return path publishes our SPF');
      assert.equal(result.dmarc.status.result, 'pass');

      const email = await api.request('GET', `/v1/emails/${sent.body.id}`);
      assert.deepEqual(email.body.authentication, {
        dkim_domain: 'acme.example',
        return_path_domain: 'bounces.acme.example',
        dmarc_aligned: true,
      });
    });

    test("a subdomain of a verified domain is signed with the parent's key", async () => {
      const sent = await api.request('POST', '/v1/emails', {
        body: { from: 'news@mail.acme.example', to: 'bob@receiver.test', subject: 'Sub', text: 'hi' },
      });
      assert.equal(sent.status, 202);
      const message = (await smtp.waitFor(2)).find((entry) => entry.to.includes('bob@receiver.test'))!;
      const result = await authenticated(dns, message.raw, message.from);
      assert.deepEqual(
        result.dkim.results.map((entry: any) => [entry.signingDomain, entry.status.result]),
        [['acme.example', 'pass']],
      );
      assert.equal(
        (await api.request('GET', `/v1/emails/${sent.body.id}`)).body.authentication.dmarc_aligned,
        true,
      );
    });

    test('another From domain (SENDER_DOMAINS=any) is signed with the fallback key and is not aligned', async () => {
      const sent = await api.request('POST', '/v1/emails', {
        body: { from: 'ceo@bank.example', to: 'carol@receiver.test', subject: 'Fallback', text: 'hi' },
      });
      assert.equal(sent.status, 202, JSON.stringify(sent.body));
      const message = (await smtp.waitFor(3)).find((entry) => entry.to.includes('carol@receiver.test'))!;
      assert.equal(message.from.split('@')[1], 'bounces.postwire.test');
      const result = await authenticated(dns, message.raw, message.from);
      assert.deepEqual(
        result.dkim.results.map((entry: any) => [entry.signingDomain, entry.status.result]),
        [['postwire-operator.test', 'pass']],
      );
      assert.deepEqual((await api.request('GET', `/v1/emails/${sent.body.id}`)).body.authentication, {
        dkim_domain: 'postwire-operator.test',
        return_path_domain: 'bounces.postwire.test',
        dmarc_aligned: false,
      });
    });

    test('a key rotation signs with the old key until the new record verifies, then with the new one', async () => {
      const domain = await verifiedDomain(api, dns, 'rotate.example');
      const oldSelector = domain.dkim_selector;
      const rotated = await api.request('POST', `/v1/domains/${domain.id}/dkim/rotate`);
      assert.equal(rotated.status, 200, JSON.stringify(rotated.body));
      assert.equal(rotated.body.status, 'verified', 'the domain stays verified meanwhile');
      assert.equal(rotated.body.dkim_selector, oldSelector);
      const dkim = rotated.body.records.filter((record: any) => record.purpose === 'dkim');
      assert.deepEqual(
        dkim.map((record: any) => [record.rotation, record.status, record.required]),
        [
          ['retiring', 'verified', true],
          ['next', 'pending', false],
        ],
      );
      const next = dkim[1];
      assert.notEqual(next.name, dkim[0].name);
      assert.ok(next.name.endsWith('._domainkey.rotate.example'));

      const selectorOf = async (to: string) => {
        const sent = await api.request('POST', '/v1/emails', {
          body: { from: 'ops@rotate.example', to, subject: 'Rotation', text: 'hi' },
        });
        assert.equal(sent.status, 202);
        const message = await until(
          () => smtp.messages.find((entry) => entry.to.includes(to)),
          8000,
          `the message to ${to}`,
        );
        const result = await authenticated(dns, message.raw, message.from);
        return result.dkim.results.map((entry: any) => [entry.selector, entry.status.result]);
      };
      assert.deepEqual(await selectorOf('before@receiver.test'), [[oldSelector, 'pass']]);

      // Not published yet: verifying keeps the old key.
      const early = await api.request('POST', `/v1/domains/${domain.id}/verify`);
      assert.equal(early.body.dkim_selector, oldSelector);

      dns.set(next.name, 'TXT', [{ type: 'TXT', text: next.value }]);
      const switched = await api.request('POST', `/v1/domains/${domain.id}/verify`);
      assert.equal(switched.body.status, 'verified');
      assert.equal(switched.body.dkim_selector, next.name.split('.')[0]);
      const after = switched.body.records.filter((record: any) => record.purpose === 'dkim');
      assert.deepEqual(
        after.map((record: any) => [record.name, record.status, record.rotation]),
        [[next.name, 'verified', undefined]],
      );
      assert.deepEqual(await selectorOf('after@receiver.test'), [[next.name.split('.')[0], 'pass']]);
    });

    test("a name another project takes over: mail queued before is signed with the operator's key, the taker's with its own", async () => {
      const old = await verifiedDomain(api, dns, 'handover.example');
      // Accepted while the project holds the name, still queued when it loses it.
      await worker.stop();
      const queued = await api.request('POST', '/v1/emails', {
        body: { from: 'ops@handover.example', to: 'queued@receiver.test', subject: 'Queued', text: 'hi' },
      });
      assert.equal(queued.status, 202, JSON.stringify(queued.body));
      assert.equal(
        (await api.request('GET', `/v1/emails/${queued.body.id}`)).body.authentication.dkim_domain,
        'handover.example',
      );
      const taker = await api.createProject('Taker');
      // Its records include its challenge (another project holds the name); all published, it verifies.
      const taken = await verifiedDomain(api, dns, 'handover.example', taker.key);
      assert.ok(dns.queries.some((query) => query.name === '_postwire-challenge.handover.example'));
      assert.equal((await api.request('GET', `/v1/domains/${old.id}`)).body.status, 'failed');
      await startSending();

      const message = await until(
        () => smtp.messages.find((entry) => entry.to.includes('queued@receiver.test')),
        8000,
        'the queued message',
      );
      assert.equal(
        message.from.split('@')[1],
        'bounces.postwire.test',
        "BOUNCE_DOMAIN, not the domain's own",
      );
      const result = await authenticated(dns, message.raw, message.from);
      assert.deepEqual(
        result.dkim.results.map((entry: any) => [entry.signingDomain, entry.status.result]),
        [['postwire-operator.test', 'pass']],
      );
      assert.ok(result.dmarc);
      assert.equal(result.dmarc.status.result, 'fail', 'not aligned any more');

      const refused = await api.request('POST', '/v1/emails', {
        body: { from: 'ops@handover.example', to: 'ada@receiver.test', subject: 'Mine?', text: 'hi' },
      });
      assert.equal(refused.body.error?.code, 'sender_domain_not_allowed');
      const sent = await api.request('POST', '/v1/emails', {
        key: taker.key,
        body: { from: 'ops@handover.example', to: 'taker@receiver.test', subject: 'Ours', text: 'hi' },
      });
      assert.equal(sent.status, 202, JSON.stringify(sent.body));
      const signed = await until(
        () => smtp.messages.find((entry) => entry.to.includes('taker@receiver.test')),
        8000,
        "the taker's message",
      );
      const verified = await authenticated(dns, signed.raw, signed.from);
      assert.deepEqual(
        verified.dkim.results.map((entry: any) => [entry.signingDomain, entry.selector, entry.status.result]),
        [['handover.example', taken.dkim_selector, 'pass']],
      );
    });

    test('a domain another project verified is refused, even with SENDER_DOMAINS=any', async () => {
      const other = await api.createProject('Impostor');
      const before = await api.rowCounts();
      for (const from of ['hello@acme.example', 'Boss <boss@deep.mail.acme.example>']) {
        const refused = await api.request('POST', '/v1/emails', {
          key: other.key,
          body: { from, to: 'ada@receiver.test', subject: 'Spoof', text: 'hi' },
        });
        assert.equal(refused.status, 422, JSON.stringify(refused.body));
        assert.equal(refused.body.error.param, 'from');
        assert.equal(refused.body.error.code, 'sender_domain_not_allowed');
      }
      const batch = await api.request('POST', '/v1/emails/batch', {
        key: other.key,
        body: [
          { from: 'me@other.example', to: 'ada@receiver.test', subject: 'Fine', text: 'hi' },
          { from: 'me@acme.example', to: 'ada@receiver.test', subject: 'Spoof', text: 'hi' },
        ],
      });
      assert.equal(batch.status, 422);
      assert.equal(batch.body.error.param, '[1].from');
      assert.deepEqual(await api.rowCounts(), before, 'nothing stored');
    });
  });

  describe(`SENDER_DOMAINS=verified (${engine})`, { skip: engineSkip(engine) }, () => {
    let dns: TestDnsServer;
    let smtp: TestSmtpServer;
    let api: TestApp;

    before(async () => {
      dns = await startDnsServer();
      smtp = await startSmtpServer();
      const config = configFor(dns, smtp, { MAIL_TRANSPORT: 'direct', SMTP_URL: '' });
      assert.equal(config.senderDomains, 'verified', 'the default in direct mode');
      api = await startTestApp(engine, {
        dns: createDns({ servers: config.dnsServers }),
        domains: domainSettingsFromConfig(config),
      });
    });
    after(async () => {
      await api.close();
      await smtp.close();
      await dns.close();
    });

    test('refuses a domain the project has not verified, saying which to add, and stores nothing', async () => {
      const before = await api.rowCounts();
      const refused = await api.request('POST', '/v1/emails', {
        body: { from: 'ceo@bank.example', to: 'ada@receiver.test', subject: 'Hi', text: 'hi' },
      });
      assert.equal(refused.status, 422);
      assert.equal(refused.body.error.code, 'sender_domain_not_verified');
      assert.equal(refused.body.error.param, 'from');
      assert.match(refused.body.error.message, /POST \/v1\/domains \{"name": "bank.example"\}/);

      // Added but not verified yet: the message points at the verification.
      const pending = await api.request('POST', '/v1/domains', { body: { name: 'bank.example' } });
      const still = await api.request('POST', '/v1/emails', {
        body: { from: 'ceo@bank.example', to: 'ada@receiver.test', subject: 'Hi', text: 'hi' },
      });
      assert.equal(still.status, 422);
      assert.match(still.body.error.message, new RegExp(`/v1/domains/${pending.body.id}/verify`));
      assert.deepEqual(await api.rowCounts(), before, 'no email, recipient or event stored');
    });

    test("accepts the project's verified domain and refuses another project's", async () => {
      await verifiedDomain(api, dns, 'verified-sender.example');
      const accepted = await api.request('POST', '/v1/emails', {
        body: { from: 'hi@verified-sender.example', to: 'ada@receiver.test', subject: 'Hi', text: 'hi' },
      });
      assert.equal(accepted.status, 202, JSON.stringify(accepted.body));
      const other = await api.createProject('Other');
      const refused = await api.request('POST', '/v1/emails', {
        key: other.key,
        body: { from: 'hi@verified-sender.example', to: 'ada@receiver.test', subject: 'Hi', text: 'hi' },
      });
      assert.equal(refused.status, 422);
      assert.equal(refused.body.error.code, 'sender_domain_not_allowed');
    });
  });
}
