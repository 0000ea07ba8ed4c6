import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { createDns, parseDnsServer } from '../src/lib/dns.ts';
import { EVENT_KIND_NAMES } from '../src/modules/event-kinds/event-kinds.ts';
import { ALL_ENGINES, engineSkip, startTestApp } from './helpers/app.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';
import { startReceiver } from './helpers/receiver.ts';
import { ownLoopbackAddress, startSmtpServer } from './helpers/smtp.ts';
import { startConfiguredSendingWorker } from './helpers/sending.ts';

describe('the test DNS server and the resolver DNS_SERVERS configures', () => {
  let dns: TestDnsServer;
  before(async () => {
    dns = await startDnsServer();
  });
  after(() => dns.close());

  test('answers MX, TXT and address questions over UDP', async () => {
    dns.add('acme.test', { type: 'MX', exchange: 'mx.acme.test', priority: 10 });
    dns.add('acme.test', { type: 'TXT', text: 'v=spf1 -all' });
    dns.add('mx.acme.test', { type: 'A', address: '127.0.0.1' }, { type: 'AAAA', address: '::1' });
    const resolver = createDns({ servers: [dns.address] });
    assert.deepEqual(await resolver.resolveMx('acme.test'), [{ exchange: 'mx.acme.test', priority: 10 }]);
    assert.deepEqual(await resolver.resolveTxt('ACME.test'), [['v=spf1 -all']]);
    assert.deepEqual(await resolver.resolveAddresses('mx.acme.test'), ['127.0.0.1', '::1']);
    assert.deepEqual(await resolver.resolveAddresses('nowhere.acme.test'), []);
    assert.ok(dns.queries.some((query) => query.name === 'acme.test' && query.transport === 'udp'));
  });

  test('resolve() answers the record types mail authentication asks for, as node:dns shapes them', async () => {
    dns.add('auth.test', { type: 'MX', exchange: 'mx.auth.test', priority: 5 });
    dns.add('auth.test', { type: 'TXT', text: 'v=spf1 a -all' }, { type: 'A', address: '192.0.2.5' });
    dns.add('auth.test', { type: 'AAAA', address: '2001:db8::5' });
    const resolver = createDns({ servers: [dns.address] });
    assert.deepEqual(await resolver.resolve('auth.test', 'A'), ['192.0.2.5']);
    assert.deepEqual(await resolver.resolve('auth.test', 'AAAA'), ['2001:db8::5']);
    assert.deepEqual(await resolver.resolve('auth.test', 'TXT'), [['v=spf1 a -all']]);
    const [mx] = (await resolver.resolve('auth.test', 'MX')) as Array<{ exchange: string; priority: number }>;
    assert.deepEqual([mx?.exchange, mx?.priority], ['mx.auth.test', 5]);
    await assert.rejects(resolver.resolve('auth.test', 'CNAME'), { code: 'ENODATA' });
    await assert.rejects(resolver.resolve('nowhere.auth.test', 'A'), { code: 'ENOTFOUND' });
  });

  test('says which names do not exist (ENOTFOUND) and which have no record of a type (ENODATA)', async () => {
    dns.add('only-a.test', { type: 'A', address: '192.0.2.1' });
    const resolver = createDns({ servers: [dns.address] });
    await assert.rejects(resolver.resolveTxt('missing.test'), { code: 'ENOTFOUND' });
    await assert.rejects(resolver.resolveMx('only-a.test'), { code: 'ENODATA' });
    // A name with records only below it exists (an "empty non-terminal").
    dns.add('a.b.parent.test', { type: 'TXT', text: 'x' });
    await assert.rejects(resolver.resolveTxt('b.parent.test'), { code: 'ENODATA' });
  });

  test('an answer too big for UDP is truncated, and the resolver asks again over TCP', async () => {
    const long = `v=DKIM1; k=rsa; p=${'A'.repeat(700)}`;
    dns.add('big._domainkey.acme.test', { type: 'TXT', text: long });
    const before = dns.queries.length;
    const resolver = createDns({ servers: [dns.address] });
    const [record] = await resolver.resolveTxt('big._domainkey.acme.test');
    assert.equal(record!.join(''), long, 'the 255-byte strings join back into the value');
    const asked = dns.queries.slice(before).filter((query) => query.name === 'big._domainkey.acme.test');
    assert.ok(
      asked.some((query) => query.transport === 'tcp'),
      JSON.stringify(asked),
    );
  });

  test('DNS_SERVERS takes ip and ip:port, comma-separated; anything else stops the start', () => {
    assert.deepEqual(loadConfig({}).dnsServers, []);
    assert.deepEqual(loadConfig({ DNS_SERVERS: '127.0.0.1:5353, 192.0.2.53,[::1]:53,::1' }).dnsServers, [
      '127.0.0.1:5353',
      '192.0.2.53',
      '[::1]:53',
      '::1',
    ]);
    for (const bad of ['dns.example', '127.0.0.1:0', '127.0.0.1:99999', '300.1.1.1']) {
      assert.throws(() => loadConfig({ DNS_SERVERS: bad }), /DNS_SERVERS must be/, bad);
      assert.equal(parseDnsServer(bad), undefined, bad);
    }
  });
});

for (const engine of ALL_ENGINES) {
  describe(
    `direct mode finds mail servers through DNS_SERVERS (${engine})`,
    { skip: engineSkip(engine) },
    () => {
      test('delivers to the MX the DNS server names, at the address it gives', async () => {
        const dns = await startDnsServer();
        // The MX listens on port 25, as real ones do, at a loopback address of its own.
        const mxAddress = ownLoopbackAddress();
        const smtp = await startSmtpServer({ host: mxAddress, port: 25 });
        const api = await startTestApp(engine, { allowPrivateUrls: true, worker: true });
        const receiver = await startReceiver();
        try {
          const webhook = await api.request('POST', '/v1/webhooks', {
            body: { url: receiver.url, events: EVENT_KIND_NAMES },
          });
          assert.equal(webhook.status, 201);
          // The recipient domain exists only on the test DNS server: the system's resolver knows nothing of it.
          dns.add('customer-mail.test', { type: 'MX', exchange: 'mx1.customer-mail.test', priority: 10 });
          dns.add('mx1.customer-mail.test', { type: 'A', address: mxAddress });
          const config = loadConfig({
            MAIL_TRANSPORT: 'direct',
            DNS_SERVERS: dns.address,
            POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
            SEND_TIMEOUT: '3s',
          });
          const worker = await startConfiguredSendingWorker(api, config);
          try {
            const sent = await api.request('POST', '/v1/emails', {
              body: {
                from: 'hello@sender.test',
                to: 'ada@customer-mail.test',
                subject: 'Found through DNS',
                text: 'hi',
              },
            });
            assert.equal(sent.status, 202, JSON.stringify(sent.body));
            const [message] = await smtp.waitFor(1);
            assert.deepEqual(message!.to, ['ada@customer-mail.test']);
            assert.ok(
              dns.queries.some((query) => query.name === 'customer-mail.test' && query.type === 'MX'),
              'the MX came from the test DNS server',
            );
            await receiver.waitFor(2);
            const types = receiver.requests.map((request) => JSON.parse(request.body).type).sort();
            assert.deepEqual(types, ['email.delivered', 'email.sent']);
          } finally {
            await worker.stop();
          }
        } finally {
          await api.close();
          await receiver.close();
          await smtp.close();
          await dns.close();
        }
      });
    },
  );
}
