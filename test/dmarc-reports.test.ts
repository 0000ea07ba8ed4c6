import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { createRetention } from '../src/modules/retention/retention.ts';
import { type RunningServer, startServer } from '../src/server.ts';
import { ALL_ENGINES, engineSkip } from './helpers/app.ts';
import { dmarcFixture, dmarcMail, providerMails, zipOf } from './helpers/dmarc-mail.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';
import { createProcessDatabase, type ProcessDatabase, requestJson } from './helpers/process.ts';
import { mailReport } from './helpers/reports.ts';
import { until } from './helpers/until.ts';
import { createRepositories } from '../src/repositories.ts';

// DMARC aggregate reports mailed to dmarc@<BOUNCE_DOMAIN> at the inbound listener of a running server, read
// by its inbound worker, stored for the verified domain, and summed at GET /v1/domains/{id}/dmarc.

const KEY = 'pw_dmarc_test_key_0123456789abcdef';
const BOUNCE_DOMAIN = 'bounces.postwire.test';
const RUA = `dmarc@${BOUNCE_DOMAIN}`;

for (const engine of ALL_ENGINES) {
  describe(`DMARC aggregate reports (${engine})`, { skip: engineSkip(engine) }, () => {
    let database: ProcessDatabase;
    let server: RunningServer;
    let dns: TestDnsServer;
    let domainId: string;

    const api = (method: string, path: string, body?: unknown) =>
      requestJson(`${server.url}${path}`, KEY, method, body);

    /** Mails a report to the listener; resolves to its inbound message once read. */
    const report = async (raw: Buffer, to = RUA) => {
      const reply = await mailReport(server.inboundPort!, to, raw);
      const id = /queued as (inb_[0-9a-z]+)/.exec(reply)?.[1];
      assert.ok(id, reply);
      // Read from the table: an unmatched report belongs to no project, so no key sees it.
      return until(
        async () => {
          const row = await database.database.handle.db
            .selectFrom('inbound_messages')
            .select(['kind', 'status', 'detail', 'project_id'])
            .where('id', '=', id)
            .executeTakeFirst();
          return row && row.status !== 'pending' ? row : undefined;
        },
        8000,
        `${id} to be read`,
      );
    };

    before(async () => {
      database = await createProcessDatabase(engine);
      dns = await startDnsServer();
      server = await startServer(
        loadConfig({
          ...database.env,
          PORT: '0',
          POSTWIRE_BOOTSTRAP_KEY: KEY,
          POSTWIRE_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
          BOUNCE_DOMAIN,
          DNS_SERVERS: dns.address,
          INBOUND_SMTP_PORT: '0',
          LOG_LEVEL: 'silent',
        }),
        { worker: true, stdout: { write() {} } },
      );
      const created = await api('POST', '/v1/domains', { name: 'acme.test' });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      domainId = created.body.id;
      for (const record of created.body.records.filter((r: any) => r.type === 'TXT')) {
        dns.add(record.name, { type: 'TXT', text: record.value });
      }
      const verified = await api('POST', `/v1/domains/${domainId}/verify`);
      assert.equal(verified.body.status, 'verified', JSON.stringify(verified.body));
    });
    after(async () => {
      await server?.close();
      await dns?.close();
      await database?.cleanup();
    });

    test("Google's, Microsoft's and Yahoo's reports are stored for the domain and summed", async () => {
      const mails = providerMails(RUA);
      const google = await report(mails.google);
      assert.deepEqual(
        [google.kind, google.status, google.detail],
        [
          'dmarc_aggregate',
          'applied',
          `a DMARC aggregate report from google.com (13847596142384752196) about acme.test: 2 records stored for acme.test (${domainId})`,
        ],
      );
      // The project sees it among its reports.
      const listed = await api('GET', '/v1/inbound-messages');
      assert.deepEqual(
        listed.body.data.map((message: any) => [message.kind, message.status]),
        [['dmarc_aggregate', 'applied']],
      );
      assert.equal((await report(mails.outlook)).status, 'applied');
      assert.equal((await report(mails.yahoo)).status, 'applied');
      // The same report again (a receiver's retry): nothing stored twice.
      const again = await report(mails.google);
      assert.equal(again.status, 'no_change', again.detail ?? undefined);

      const summary = await api('GET', `/v1/domains/${domainId}/dmarc?since=2026-11-20&until=2026-11-28`);
      assert.equal(summary.status, 200, JSON.stringify(summary.body));
      assert.deepEqual(summary.body, {
        object: 'dmarc_summary',
        domain_id: domainId,
        since: '2026-11-20T00:00:00.000Z',
        until: '2026-11-28T00:00:00.000Z',
        reports: 3,
        messages: 1342 + 12 + 410 + 3 + 88,
        dkim: { pass: 1342 + 410 + 88, fail: 12 + 3 },
        spf: { pass: 1342 + 410 + 3, fail: 12 + 88 },
        dmarc: { pass: 1342 + 410 + 3 + 88, fail: 12 },
        disposition: { none: 1342 + 12 + 410 + 88, quarantine: 3, reject: 0 },
        sources: [
          source('192.0.2.25', 'google.com', { messages: 1342, dkim: 1342, spf: 1342, dmarc: 1342 }),
          source('192.0.2.25', 'Outlook.com', { messages: 410, dkim: 410, spf: 410, dmarc: 410 }),
          source('192.0.2.25', 'Yahoo', { messages: 88, dkim: 88, spf: 0, dmarc: 88 }),
          source('203.0.113.77', 'google.com', { messages: 12, dkim: 0, spf: 0, dmarc: 0 }),
          {
            ...source('2001:db8:4:1::25', 'Outlook.com', { messages: 3, dkim: 0, spf: 3, dmarc: 3 }),
            disposition: { none: 0, quarantine: 3, reject: 0 },
          },
        ],
      });
      // Another period holds none of them.
      const before = await api('GET', `/v1/domains/${domainId}/dmarc?since=2026-10-01&until=2026-11-01`);
      assert.deepEqual([before.body.reports, before.body.messages, before.body.sources], [0, 0, []]);
    });

    test('a report about a domain no project holds, and an unreadable one, say so', async () => {
      const other = dmarcMail({
        from: 'noreply-dmarc-support@google.com',
        to: RUA,
        subject: 'Report domain: elsewhere.test',
        filename: 'r.zip',
        contentType: 'application/zip',
        attachment: zipOf(
          'r.xml',
          Buffer.from(dmarcFixture('google').replaceAll('acme.test', 'elsewhere.test')),
        ),
      });
      const unmatched = await report(other);
      assert.deepEqual([unmatched.kind, unmatched.status], ['dmarc_aggregate', 'unmatched']);
      assert.match(unmatched.detail ?? '', /about elsewhere\.test: no project holds that domain verified$/);
      const laughs = dmarcMail({
        from: 'x@reports.test',
        to: RUA,
        subject: 'Report',
        filename: 'r.xml',
        contentType: 'text/xml',
        attachment: Buffer.from('<!DOCTYPE f [<!ENTITY a "aaaa">]><feedback>&a;</feedback>'),
      });
      const refused = await report(laughs);
      assert.deepEqual(
        [refused.status, refused.detail],
        ['unreadable', 'a DMARC report refused: an XML DOCTYPE or entity declaration'],
      );
    });

    test('a bad period is a 422, an unknown domain a 404', async () => {
      const reversed = await api('GET', `/v1/domains/${domainId}/dmarc?since=2026-11-20&until=2026-11-01`);
      assert.equal(reversed.status, 422, JSON.stringify(reversed.body));
      assert.deepEqual(
        [reversed.body.error.param, reversed.body.error.message],
        ['since', '`since` must be before `until`.'],
      );
      const long = await api('GET', `/v1/domains/${domainId}/dmarc?since=2024-01-01&until=2026-01-01`);
      assert.equal(long.status, 422);
      assert.equal((await api('GET', '/v1/domains/dom_nothere/dmarc')).status, 404);
    });

    test('RETENTION deletes the records stored before it, and keeps the domain', async () => {
      const DAY = 86_400_000;
      const retention = createRetention({
        repositories: createRepositories(database.database.handle),
        clock: { now: () => new Date(Date.now() + 2 * DAY) },
        retentionMs: DAY,
      });
      const due = (await retention.dryRun()).find((entry) => entry.table === 'dmarc_records');
      assert.deepEqual(due, { table: 'dmarc_records', rows: 5 });
      await retention.prune();
      const summary = await api('GET', `/v1/domains/${domainId}/dmarc?since=2026-11-20&until=2026-11-28`);
      assert.deepEqual([summary.status, summary.body.messages, summary.body.sources], [200, 0, []]);
    });

    test("a verified domain's own dmarc@ address is refused until its project reads it; then what arrives is that project's", async () => {
      const own = 'dmarc@acme.test';
      /** Google's report about `about`, with a report id of its own, mailed to the domain's address. */
      const google = (about: string, reportId: string) =>
        dmarcMail({
          from: 'noreply-dmarc-support@google.com',
          to: own,
          subject: `Report domain: ${about} Submitter: google.com Report-ID: ${reportId}`,
          filename: `google.com!${about}!1764201600!1764287999.zip`,
          contentType: 'application/zip',
          attachment: zipOf(
            'r.xml',
            Buffer.from(
              dmarcFixture('google').replaceAll('acme.test', about).replace('13847596142384752196', reportId),
            ),
          ),
        });
      // Off (the default): no route takes the address, so the listener refuses it at RCPT.
      await assert.rejects(mailReport(server.inboundPort!, own, google('acme.test', '900001')), /550/);

      const on = await api('PATCH', `/v1/domains/${domainId}`, { dmarc_reports: true });
      assert.deepEqual([on.status, on.body.dmarc_reports], [200, true], JSON.stringify(on.body));
      const mine = await report(google('acme.test', '900001'), own);
      assert.deepEqual(
        [mine.kind, mine.status, mine.detail],
        [
          'dmarc_aggregate',
          'applied',
          `a DMARC aggregate report from google.com (900001) about acme.test: 2 records stored for acme.test (${domainId})`,
        ],
      );
      const summary = await api('GET', `/v1/domains/${domainId}/dmarc?since=2026-11-20&until=2026-11-28`);
      assert.deepEqual([summary.body.reports, summary.body.messages], [1, 1342 + 12]);

      // A report about another project's verified domain, mailed to this domain's address, is not stored for
      // that project, and this one is not told that another holds the name.
      const repositories = createRepositories(database.database.handle);
      const now = new Date().toISOString();
      await repositories.projects.insertProject({
        id: 'prj_other',
        name: 'Other',
        isDefault: false,
        createdAt: now,
      });
      const created = await api('POST', '/v1/domains', { name: 'other.test' });
      const template = await database.database.handle.db
        .selectFrom('domains')
        .selectAll()
        .where('id', '=', created.body.id)
        .executeTakeFirstOrThrow();
      await database.database.handle.db
        .insertInto('domains')
        .values({
          ...template,
          id: 'dom_other',
          project_id: 'prj_other',
          status: 'verified',
          verified_at: now,
          return_path_verified: false,
          receiving: false,
          receiving_verified: false,
          dmarc_reports: false,
        })
        .execute();
      await api('DELETE', `/v1/domains/${created.body.id}`);
      const theirs = await report(google('other.test', '900002'), own);
      assert.deepEqual(
        [theirs.kind, theirs.status, theirs.detail],
        [
          'dmarc_aggregate',
          'unmatched',
          'a DMARC aggregate report from google.com (900002) about other.test: this project holds no verified domain of that name',
        ],
      );
      const stored = await database.database.handle.db
        .selectFrom('dmarc_records')
        .select('domain_id')
        .where('domain_id', '=', 'dom_other')
        .execute();
      assert.deepEqual(stored, []);
      // The same report to dmarc@<BOUNCE_DOMAIN> is the holder's, as before.
      assert.equal((await report(google('other.test', '900002'), RUA)).status, 'applied');

      // Off again: refused again.
      const off = await api('PATCH', `/v1/domains/${domainId}`, { dmarc_reports: false });
      assert.equal(off.body.dmarc_reports, false);
      await assert.rejects(mailReport(server.inboundPort!, own, google('acme.test', '900003')), /550/);
    });
  });
}

function source(
  ip: string,
  reporter: string,
  pass: { messages: number; dkim: number; spf: number; dmarc: number },
) {
  return {
    source_ip: ip,
    reporter,
    messages: pass.messages,
    dkim: { pass: pass.dkim, fail: pass.messages - pass.dkim },
    spf: { pass: pass.spf, fail: pass.messages - pass.spf },
    dmarc: { pass: pass.dmarc, fail: pass.messages - pass.dmarc },
    disposition: { none: pass.messages, quarantine: 0, reject: 0 },
  };
}
