import assert from 'node:assert/strict';
import { Resolver } from 'node:dns/promises';
import { describe, test } from 'node:test';
import { dkimVerify } from 'mailauth';
import { ALL_ENGINES, engineSkip } from './helpers/app.ts';
import { startDnsServer } from './helpers/dns.ts';
import { createProcessDatabase, requestJson, startServerProcess } from './helpers/process.ts';
import { ownLoopbackAddress, startSmtpServer } from './helpers/smtp.ts';

const KEY = 'pw_domains_process_test_key_0123456789';

const call = (base: string, method: string, path: string, body?: unknown) =>
  requestJson(`${base}/v1${path}`, KEY, method, body);

for (const engine of ALL_ENGINES) {
  describe(
    `a server in direct mode, configured from the environment (${engine})`,
    { skip: engineSkip(engine) },
    () => {
      test('refuses unverified From domains, then delivers a verified one signed d=<domain> through DNS_SERVERS', async (t) => {
        const dns = await startDnsServer();
        // The MX listens on port 25, as real ones do, at a loopback address of its own.
        const mxAddress = ownLoopbackAddress();
        const smtp = await startSmtpServer({ host: mxAddress, port: 25 });
        const own = await createProcessDatabase(engine);
        t.after(async () => {
          await smtp.close();
          await dns.close();
          await own.cleanup();
        });
        // The recipient's domain and its mail server exist only on the test DNS server.
        dns.add('receiver.test', { type: 'MX', exchange: 'mx.receiver.test', priority: 10 });
        dns.add('mx.receiver.test', { type: 'A', address: mxAddress });
        const server = await startServerProcess({
          ...own.env,
          POSTWIRE_BOOTSTRAP_KEY: KEY,
          POSTWIRE_ENCRYPTION_KEY: 'ab'.repeat(32),
          POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
          MAIL_TRANSPORT: 'direct',
          DNS_SERVERS: dns.address,
          INBOUND_SMTP_PORT: '0',
          BOUNCE_DOMAIN: 'bounces.postwire.test',
          INBOUND_MX_HOST: 'inbound.postwire.test',
          SENDING_SPF: 'v=spf1 ip4:127.0.0.1 -all',
        });
        t.after(() => server.kill());

        const email = { from: 'hello@process.example', to: 'ada@receiver.test', subject: 'Hi', text: 'hi' };
        const refused = await call(server.url, 'POST', '/emails', email);
        assert.equal(refused.status, 422, 'SENDER_DOMAINS defaults to verified in direct mode');
        assert.equal(refused.body.error.code, 'sender_domain_not_verified');

        const created = await call(server.url, 'POST', '/domains', { name: 'process.example' });
        assert.equal(created.status, 201);
        for (const record of created.body.records) {
          if (record.type === 'MX')
            dns.add(record.name, { type: 'MX', exchange: record.value, priority: 10 });
          else dns.add(record.name, { type: 'TXT', text: record.value });
        }
        const verified = await call(server.url, 'POST', `/domains/${created.body.id}/verify`);
        assert.equal(verified.body.status, 'verified', JSON.stringify(verified.body.records));

        const sent = await call(server.url, 'POST', '/emails', email);
        assert.equal(sent.status, 202, JSON.stringify(sent.body));
        const [message] = await smtp.waitFor(1, 10_000);
        assert.equal(message!.from.split('@')[1], 'bounces.process.example');
        const resolver = new Resolver();
        resolver.setServers([dns.address]);
        const result = await dkimVerify(message!.raw, {
          resolver: (name: string, type: string) => resolver.resolve(name, type as 'TXT'),
        });
        assert.deepEqual(
          result.results.map((entry: any) => [entry.signingDomain, entry.status.result]),
          [['process.example', 'pass']],
        );
        assert.equal(await server.stop(), 0);
      });
    },
  );
}
