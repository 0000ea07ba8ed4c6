import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { after, describe, test } from 'node:test';
import { ARCHIVE_LIMITS } from '../src/modules/inbound/dmarc-archive.ts';
import { createDmarcReader } from '../src/modules/inbound/dmarc-reader.ts';
import { dmarcFixture, dmarcMail, providerMails, zipOf } from './helpers/dmarc-mail.ts';

// DMARC aggregate reports read on the parse threads: the large receivers' formats, and hostile ones refused
// within the caps.

const reader = createDmarcReader({ threads: 1, timeoutMs: 5000, memoryMb: 64 });
after(() => reader.close());

const attached = (attachment: Buffer, filename = 'report.xml.gz', contentType = 'application/gzip') =>
  dmarcMail({
    from: 'r@reports.test',
    to: 'dmarc@bounces.postwire.test',
    subject: 'Report',
    filename,
    contentType,
    attachment,
  });

describe('DMARC aggregate reports: the providers', () => {
  const mails = providerMails('dmarc@bounces.postwire.test');

  test("Google's zip", async () => {
    assert.deepEqual(await reader.read(mails.google), {
      report: {
        orgName: 'google.com',
        reportId: '13847596142384752196',
        begin: '2026-11-26T00:00:00.000Z',
        end: '2026-11-26T23:59:59.000Z',
        domain: 'acme.test',
        policy: 'none',
        rows: [
          {
            sourceIp: '192.0.2.25',
            count: 1342,
            disposition: 'none',
            dkim: 'pass',
            spf: 'pass',
            headerFrom: 'acme.test',
          },
          {
            sourceIp: '203.0.113.77',
            count: 12,
            disposition: 'none',
            dkim: 'fail',
            spf: 'fail',
            headerFrom: 'acme.test',
          },
        ],
      },
    });
  });

  test("Microsoft's (Outlook.com) gzip, with namespaces and an IPv6 source", async () => {
    const read = await reader.read(mails.outlook);
    assert.ok('report' in read, JSON.stringify(read));
    assert.equal(read.report.orgName, 'Outlook.com');
    assert.equal(read.report.reportId, '9f1c2e7ab4d04c3f8e2b6d51a0c7e913');
    assert.deepEqual(read.report.rows[1], {
      sourceIp: '2001:db8:4:1::25',
      count: 3,
      disposition: 'quarantine',
      dkim: 'fail',
      spf: 'pass',
      headerFrom: 'acme.test',
    });
  });

  test("Yahoo's zip", async () => {
    const read = await reader.read(mails.yahoo);
    assert.ok('report' in read, JSON.stringify(read));
    assert.deepEqual(
      [read.report.orgName, read.report.reportId, read.report.rows.length],
      ['Yahoo', '1795737600.437215', 1],
    );
  });

  test('plain XML, as some smaller receivers send it', async () => {
    const read = await reader.read(attached(Buffer.from(dmarcFixture('google')), 'report.xml', 'text/xml'));
    assert.ok('report' in read && read.report.rows.length === 2, JSON.stringify(read));
  });
});

describe('DMARC aggregate reports: hostile ones', () => {
  test('a zip bomb stops at the inflated cap', async () => {
    // 1 GiB of zeros would deflate to ~1 MiB; 64 MiB (twice the cap) is enough to show the cap holds.
    const bomb = zipOf('bomb.xml', Buffer.alloc(2 * ARCHIVE_LIMITS.xmlBytes, 0x20));
    assert.ok(bomb.length < 256 * 1024, `the bomb is small: ${bomb.length} bytes`);
    assert.deepEqual(await reader.read(attached(bomb, 'bomb.zip', 'application/zip')), {
      unreadable: 'refused: it inflates to more than 32 MiB',
    });
  });

  test('a gzip bomb too', async () => {
    const bomb = gzipSync(Buffer.alloc(2 * ARCHIVE_LIMITS.xmlBytes, 0x20));
    assert.deepEqual(await reader.read(attached(bomb)), {
      unreadable: 'refused: it inflates to more than 32 MiB',
    });
  });

  test('XML entity expansion ("billion laughs") is refused before parsing', async () => {
    const laughs = `<?xml version="1.0"?><!DOCTYPE feedback [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]><feedback><report_metadata><org_name>&lol2;</org_name></report_metadata></feedback>`;
    assert.deepEqual(await reader.read(attached(gzipSync(laughs))), {
      unreadable: 'refused: an XML DOCTYPE or entity declaration',
    });
  });

  test('an oversized attachment is refused at its cap', async () => {
    const big = Buffer.alloc(ARCHIVE_LIMITS.attachmentBytes + 1024, 0x41);
    assert.deepEqual(await reader.read(attached(big, 'big.xml', 'text/xml')), {
      unreadable: 'a report attachment over 10 MiB',
    });
  });

  test('deep nesting, no attachment, not XML', async () => {
    const deep = `<feedback>${'<a>'.repeat(100)}${'</a>'.repeat(100)}</feedback>`;
    assert.deepEqual(await reader.read(attached(gzipSync(deep))), {
      unreadable: 'refused: XML nested over 16 deep',
    });
    const plain = Buffer.from(
      'From: a@b.test\r\nTo: dmarc@bounces.postwire.test\r\nSubject: hi\r\n\r\nhello\r\n',
    );
    assert.deepEqual(await reader.read(plain), { unreadable: 'no zip, gzip or XML attachment' });
    assert.deepEqual(await reader.read(attached(gzipSync('PDF-1.4'))), {
      unreadable: 'refused: neither zip, gzip nor XML',
    });
  });
});
