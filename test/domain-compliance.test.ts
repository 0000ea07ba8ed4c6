import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { createDns, type Dns } from '../src/lib/dns.ts';
import { checkCompliance, reverseName } from '../src/modules/domains/compliance.ts';
import type { ComplianceSettings, DomainSettings } from '../src/modules/domains/domain-settings.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';

// The compliance preflight of GET /v1/domains/{id}, looked up on a real authoritative DNS server.

const COMPLIANCE: ComplianceSettings = {
  transport: 'direct',
  sendingHost: 'out.sender.test',
  relayTls: false,
  returnPath: true,
  bounceDomain: 'bounces.postwire.test',
  publicUrl: 'https://mail.postwire.test',
  listUnsubscribe: true,
};
const SETTINGS: DomainSettings = {
  returnPath: { mxHost: 'inbound.postwire.test', spf: 'v=spf1 a:out.sender.test -all' },
  recheckMs: 3_600_000,
  senderDomains: 'any',
  bounceDomain: 'bounces.postwire.test',
};

const statuses = (checks: Array<{ check: string; status: string }>) =>
  Object.fromEntries(checks.map(({ check, status }) => [check, status]));

const rsaRecord = (bits: number) =>
  `v=DKIM1; k=rsa; p=${generateKeyPairSync('rsa', { modulusLength: bits }).publicKey.export({ type: 'spki', format: 'der' }).toString('base64')}`;

/** The sending host: out.sender.test at 192.0.2.25, whose PTR names it back. */
function publishHost(dns: TestDnsServer) {
  dns.set('out.sender.test', 'A', [{ type: 'A', address: '192.0.2.25' }]);
  dns.set(reverseName('192.0.2.25'), 'PTR', [{ type: 'PTR', name: 'out.sender.test' }]);
}

for (const engine of ALL_ENGINES) {
  describe(`domain compliance (${engine})`, { skip: engineSkip(engine) }, () => {
    let dns: TestDnsServer;
    let api: TestApp;

    before(async () => {
      dns = await startDnsServer();
      publishHost(dns);
      api = await startTestApp(engine, {
        dns: createDns({ servers: [dns.address] }),
        domains: SETTINGS,
        publicUrl: COMPLIANCE.publicUrl!,
        engagementDefaults: { trackOpens: false, trackClicks: false, listUnsubscribe: true },
        // Direct mode's sending host, as the configuration names it; no worker runs, so nothing is sent.
        config: { mailTransport: 'direct', mailHostname: COMPLIANCE.sendingHost! },
      });
    });
    after(async () => {
      await api.close();
      await dns.close();
    });

    async function addAndVerify(name: string, publish: (domain: any) => void) {
      const created = await api.request('POST', '/v1/domains', { body: { name } });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      assert.equal(created.body.compliance, null, 'not looked up yet');
      publish(created.body);
      const verified = await api.request('POST', `/v1/domains/${created.body.id}/verify`);
      assert.equal(verified.status, 200, JSON.stringify(verified.body));
      const read = await api.request('GET', `/v1/domains/${created.body.id}`);
      assert.deepEqual(read.body.compliance, verified.body.compliance, 'stored by the check, shown on read');
      return read.body.compliance;
    }

    test('a domain that publishes everything well passes every check', async () => {
      const compliance = await addAndVerify('good.test', (domain) => {
        for (const record of domain.records.filter((r: any) => r.type === 'TXT')) {
          dns.add(record.name, { type: 'TXT', text: record.value });
        }
        dns.set('_dmarc.good.test', 'TXT', [
          { type: 'TXT', text: 'v=DMARC1; p=reject; rua=mailto:dmarc@bounces.postwire.test' },
        ]);
      });
      assert.deepEqual(statuses(compliance), {
        spf: 'pass',
        spf_lookups: 'pass',
        spf_sending_host: 'pass',
        dkim_key: 'pass',
        dmarc: 'pass',
        dmarc_reports: 'pass',
        reverse_dns: 'pass',
        helo: 'pass',
        tls: 'pass',
        list_unsubscribe: 'pass',
      });
      const reason = (id: string) => compliance.find((check: any) => check.check === id).reason;
      assert.equal(reason('spf_lookups'), 'The policy takes 1 of the 10 DNS lookups receivers allow.');
      assert.equal(
        reason('spf_sending_host'),
        'The policy authorizes 192.0.2.25, the addresses of out.sender.test.',
      );
      assert.equal(reason('dkim_key'), 'The published key is RSA 2048 bits (2048 or more).');
    });

    test('too many SPF lookups, a host left out, a 1024-bit key and p=none each say why', async () => {
      const compliance = await addAndVerify('weak.test', (domain) => {
        // 11 includes in a chain: a receiver stops at the tenth lookup with permerror.
        dns.set('bounces.weak.test', 'TXT', [{ type: 'TXT', text: 'v=spf1 include:s1.weak.test -all' }]);
        for (let n = 1; n <= 11; n++) {
          const next = n < 11 ? ` include:s${n + 1}.weak.test` : '';
          dns.set(`s${n}.weak.test`, 'TXT', [
            { type: 'TXT', text: `v=spf1 ip4:198.51.100.${n}${next} -all` },
          ]);
        }
        dns.set(`${domain.dkim_selector}._domainkey.weak.test`, 'TXT', [
          { type: 'TXT', text: rsaRecord(1024) },
        ]);
        dns.set('_dmarc.weak.test', 'TXT', [{ type: 'TXT', text: 'v=DMARC1; p=none' }]);
      });
      const byId = Object.fromEntries(compliance.map((check: any) => [check.check, check]));
      assert.deepEqual(
        [byId.spf_lookups, byId.spf_sending_host, byId.dkim_key, byId.dmarc, byId.dmarc_reports],
        [
          {
            check: 'spf_lookups',
            status: 'fail',
            reason: 'The policy takes 11 DNS lookups; past 10 receivers answer permerror and SPF fails.',
          },
          {
            check: 'spf_sending_host',
            status: 'fail',
            reason:
              'The policy does not authorize 192.0.2.25 (out.sender.test): add ip4:/ip6: or a:out.sender.test.',
          },
          {
            check: 'dkim_key',
            status: 'warn',
            reason:
              'The published key is RSA 1024 bits; receivers expect 2048 (RFC 8301 refuses less than 1024).',
          },
          {
            check: 'dmarc',
            status: 'warn',
            reason:
              'DMARC is published with p=none: it only monitors, and BIMI logos need p=quarantine or p=reject.',
          },
          {
            check: 'dmarc_reports',
            status: 'warn',
            reason:
              'Add rua=mailto:dmarc@bounces.postwire.test to the policy so this server reads the aggregate reports.',
          },
        ],
      );
    });

    test('a domain that publishes nothing fails SPF, DKIM and DMARC', async () => {
      const compliance = await addAndVerify('bare.test', () => {});
      const { spf, dkim_key, dmarc } = statuses(compliance);
      assert.deepEqual({ spf, dkim_key, dmarc }, { spf: 'fail', dkim_key: 'fail', dmarc: 'fail' });
      assert.equal(
        compliance.find((check: any) => check.check === 'spf').reason,
        'bounces.bare.test publishes no SPF record, so receivers cannot tell which hosts may send as it.',
      );
      assert.equal(
        compliance.some((check: any) => check.check === 'spf_lookups'),
        false,
      );
    });
  });
}

describe('compliance of the sending host and the transport', () => {
  let server: TestDnsServer;
  let dns: Dns;
  const subject = { name: 'host.test', dkimSelector: 'pw1' };
  before(async () => {
    server = await startDnsServer();
    dns = createDns({ servers: [server.address] });
    server.set('host.test', 'TXT', [{ type: 'TXT', text: 'v=spf1 -all' }]);
    // A PTR naming another host, which resolves back: reverse DNS holds, HELO is not the PTR name.
    server.set('other-helo.test', 'A', [{ type: 'A', address: '192.0.2.30' }]);
    server.set(reverseName('192.0.2.30'), 'PTR', [{ type: 'PTR', name: 'vps-30.hoster.test' }]);
    server.set('vps-30.hoster.test', 'A', [{ type: 'A', address: '192.0.2.30' }]);
    // A PTR whose name does not resolve back to the address.
    server.set('no-fcrdns.test', 'A', [{ type: 'A', address: '192.0.2.31' }]);
    server.set(reverseName('192.0.2.31'), 'PTR', [{ type: 'PTR', name: 'elsewhere.hoster.test' }]);
    server.set('elsewhere.hoster.test', 'A', [{ type: 'A', address: '192.0.2.99' }]);
  });
  after(() => server.close());

  const run = (settings: Partial<ComplianceSettings>) =>
    checkCompliance(dns, subject, { ...COMPLIANCE, returnPath: false, ...settings }).then(statuses);

  test('HELO that is not the PTR name warns; a PTR that does not resolve back fails', async () => {
    assert.deepEqual(
      (({ reverse_dns, helo }) => ({ reverse_dns, helo }))(await run({ sendingHost: 'other-helo.test' })),
      { reverse_dns: 'pass', helo: 'warn' },
    );
    assert.deepEqual(
      (({ reverse_dns, helo }) => ({ reverse_dns, helo }))(await run({ sendingHost: 'no-fcrdns.test' })),
      { reverse_dns: 'fail', helo: 'warn' },
    );
    const missing = await run({ sendingHost: 'nowhere.test' });
    assert.equal(missing.reverse_dns, 'fail');
    assert.equal(missing.spf_sending_host, 'warn');
  });

  test('relay and capture modes: no host checks, TLS and the SPF host say what they cannot see', async () => {
    const relay = await run({ transport: 'relay', relayTls: true, publicUrl: undefined });
    assert.deepEqual(
      [relay.tls, relay.spf_sending_host, relay.list_unsubscribe, 'reverse_dns' in relay],
      ['pass', 'warn', 'fail', false],
    );
    const plain = await run({ transport: 'relay', listUnsubscribe: false });
    assert.deepEqual([plain.tls, plain.list_unsubscribe], ['warn', 'warn']);
    assert.equal((await run({ transport: 'capture' })).tls, 'warn');
  });

  test('a domain whose project reads its own dmarc@ address passes dmarc_reports with that address in rua', async () => {
    server.set('_dmarc.own.test', 'TXT', [
      { type: 'TXT', text: 'v=DMARC1; p=reject; rua=mailto:dmarc@own.test' },
    ]);
    const reports = async (dmarcReports: boolean, settings: Partial<ComplianceSettings> = {}) =>
      (
        await checkCompliance(
          dns,
          { name: 'own.test', dkimSelector: 'pw1', dmarcReports },
          { ...COMPLIANCE, returnPath: false, ...settings },
        )
      ).find((check) => check.check === 'dmarc_reports');
    assert.deepEqual(await reports(true), {
      check: 'dmarc_reports',
      status: 'pass',
      reason:
        'Aggregate reports go to dmarc@own.test, where this server reads them (GET /v1/domains/{id}/dmarc).',
    });
    // Not read there (PATCH dmarc_reports off): the address the server reads is the one to name.
    assert.deepEqual(await reports(false), {
      check: 'dmarc_reports',
      status: 'warn',
      reason:
        'Add rua=mailto:dmarc@bounces.postwire.test to the policy so this server reads the aggregate reports.',
    });
    // Without BOUNCE_DOMAIN, and not read at the domain's address: nothing to advise.
    assert.equal(await reports(false, { bounceDomain: undefined }), undefined);
    server.set('_dmarc.own.test', 'TXT', [{ type: 'TXT', text: 'v=DMARC1; p=reject' }]);
    assert.equal(
      (await reports(true, { bounceDomain: undefined }))?.reason,
      'Add rua=mailto:dmarc@own.test to the policy so this server reads the aggregate reports.',
    );
  });

  test('reverse names of IPv4 and IPv6 addresses', () => {
    assert.equal(reverseName('192.0.2.25'), '25.2.0.192.in-addr.arpa');
    assert.equal(
      reverseName('2001:db8::1'),
      '1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa',
    );
  });
});
