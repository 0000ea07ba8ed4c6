import { readFileSync } from 'node:fs';
import { crc32, deflateRawSync, gzipSync } from 'node:zlib';

// DMARC aggregate reports as their senders mail them: the XML of test/fixtures/dmarc/ in a zip (Google,
// Yahoo) or a gzip (Microsoft), attached to a mail to dmarc@<BOUNCE_DOMAIN>.

export const dmarcFixture = (name: 'google' | 'outlook' | 'yahoo'): string =>
  readFileSync(new URL(`../fixtures/dmarc/${name}.xml`, import.meta.url), 'utf8');

/** A zip of one file, deflated (what Google and Yahoo send). */
export function zipOf(name: string, content: Buffer): Buffer {
  const data = deflateRawSync(content);
  const nameBytes = Buffer.from(name);
  const local = Buffer.alloc(30);
  local.writeUInt32LE(0x04034b50, 0);
  local.writeUInt16LE(20, 4);
  local.writeUInt16LE(8, 8);
  local.writeUInt32LE(crc32(content), 14);
  local.writeUInt32LE(data.length, 18);
  local.writeUInt32LE(content.length, 22);
  local.writeUInt16LE(nameBytes.length, 26);
  const central = Buffer.alloc(46);
  central.writeUInt32LE(0x02014b50, 0);
  central.writeUInt16LE(20, 4);
  central.writeUInt16LE(20, 6);
  central.writeUInt16LE(8, 10);
  central.writeUInt32LE(crc32(content), 16);
  central.writeUInt32LE(data.length, 20);
  central.writeUInt32LE(content.length, 24);
  central.writeUInt16LE(nameBytes.length, 28);
  central.writeUInt32LE(0, 42);
  const centralAt = local.length + nameBytes.length + data.length;
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(1, 8);
  end.writeUInt16LE(1, 10);
  end.writeUInt32LE(central.length + nameBytes.length, 12);
  end.writeUInt32LE(centralAt, 16);
  return Buffer.concat([local, nameBytes, data, central, nameBytes, end]);
}

export interface DmarcMailOptions {
  from: string;
  to: string;
  subject: string;
  filename: string;
  contentType: string;
  attachment: Buffer;
}

/** A report mail: a short text part and the attachment, base64, as every large receiver sends it. */
export function dmarcMail(options: DmarcMailOptions): Buffer {
  const body = options.attachment.toString('base64').replace(/.{76}/g, '$&\r\n');
  return Buffer.from(
    [
      `From: ${options.from}`,
      `To: ${options.to}`,
      `Subject: ${options.subject}`,
      'Message-ID: <dmarc-fixture@reports.test>',
      'MIME-Version: 1.0',
      'Content-Type: multipart/mixed; boundary="b1"',
      '',
      '--b1',
      'Content-Type: text/plain; charset=utf-8',
      '',
      `This is an aggregate report from ${options.from}.`,
      '--b1',
      `Content-Type: ${options.contentType}; name="${options.filename}"`,
      `Content-Disposition: attachment; filename="${options.filename}"`,
      'Content-Transfer-Encoding: base64',
      '',
      body,
      '--b1--',
      '',
    ].join('\r\n'),
  );
}

/** The three providers' mails of the fixtures, to `to`. */
export function providerMails(to: string) {
  const xml = (name: 'google' | 'outlook' | 'yahoo') => Buffer.from(dmarcFixture(name));
  return {
    google: dmarcMail({
      from: 'noreply-dmarc-support@google.com',
      to,
      subject: 'Report domain: acme.test Submitter: google.com Report-ID: 13847596142384752196',
      filename: 'google.com!acme.test!1795651200!1795737599.zip',
      contentType: 'application/zip',
      attachment: zipOf('google.com!acme.test!1795651200!1795737599.xml', xml('google')),
    }),
    outlook: dmarcMail({
      from: 'dmarcreport@microsoft.com',
      to,
      subject:
        'Report Domain: acme.test Submitter: protection.outlook.com Report-ID: <9f1c2e7ab4d04c3f8e2b6d51a0c7e913>',
      filename: 'protection.outlook.com!acme.test!1795651200!1795737600.xml.gz',
      contentType: 'application/gzip',
      attachment: gzipSync(xml('outlook')),
    }),
    yahoo: dmarcMail({
      from: 'dmarchelp@yahooinc.com',
      to,
      subject: 'Report Domain: acme.test Submitter: Yahoo Report-ID: <1795737600.437215>',
      filename: 'yahoo.com!acme.test!1795651200!1795737599.zip',
      contentType: 'application/zip',
      attachment: zipOf('yahoo.com!acme.test!1795651200!1795737599.xml', xml('yahoo')),
    }),
  };
}
