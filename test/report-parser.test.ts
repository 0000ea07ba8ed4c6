import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { readMessage, REPORT_LIMITS } from '../src/modules/inbound/report-parser.ts';
import { depthBomb, groupsBomb, headerBytesBomb, headerLinesBomb, partsBomb } from './helpers/bombs.ts';

// The report reader over real and real-shaped reports (test/fixtures/reports/README.md says where each
// came from), and over input that is no report at all.

const fixture = (name: string) => readFileSync(new URL(`./fixtures/reports/${name}`, import.meta.url));
const readReport = async (source: Buffer) => (await readMessage(source)).report;

test('Postfix: a bounce, a success and a delay report, as Postfix wrote them', async () => {
  assert.deepEqual(await readReport(fixture('postfix-bounce-unknown-user.eml')), {
    kind: 'delivery-status',
    reportingMta: 'vm',
    envelopeId: 'ENVID-4711',
    originalMessageId: '<msg_01fixturebounce@postwire.test>',
    recipients: [
      {
        finalRecipient: 'nobody-here@postwire.test',
        originalRecipient: 'nobody-here@postwire.test',
        action: 'failed',
        status: '5.1.1',
        diagnostic: 'unknown user: "nobody-here"',
        remoteMta: null,
      },
    ],
  });
  const success = await readReport(fixture('postfix-success.eml'));
  assert.equal(success.kind, 'delivery-status');
  if (success.kind !== 'delivery-status') return;
  assert.deepEqual(
    success.recipients.map((r) => [r.finalRecipient, r.action, r.status]),
    [['root@postwire.test', 'delivered', '2.0.0']],
  );
  assert.equal(success.originalMessageId, '<msg_01fixturesuccess@postwire.test>');
  const delay = await readReport(fixture('postfix-delay.eml'));
  assert.equal(delay.kind, 'delivery-status');
  if (delay.kind !== 'delivery-status') return;
  assert.deepEqual(
    delay.recipients.map((r) => [r.finalRecipient, r.action, r.status, r.diagnostic]),
    [['later@slow.test', 'delayed', '4.4.1', 'connect to 127.0.0.1[127.0.0.1]:1: Connection refused']],
  );
});

test('Exim, Gmail and Exchange Online bounces', async () => {
  const exim = await readReport(fixture('exim-bounce.eml'));
  assert.deepEqual(
    exim.kind === 'delivery-status' && [exim.reportingMta, exim.originalMessageId, exim.recipients],
    [
      'mail.example.net',
      '<msg_01eximfixture@example.com>',
      [
        {
          finalRecipient: 'gone@example.org',
          originalRecipient: null,
          action: 'failed',
          status: '5.0.0',
          diagnostic:
            '550 5.1.1 <gone@example.org>: Recipient address rejected: User unknown in local recipient table',
          remoteMta: 'mx.example.org',
        },
      ],
    ],
  );
  const gmail = await readReport(fixture('gmail-bounce.eml'));
  assert.equal(gmail.kind, 'delivery-status');
  if (gmail.kind !== 'delivery-status') return;
  assert.equal(gmail.originalMessageId, '<msg_01gmailfixture@example.com>');
  assert.equal(gmail.recipients[0]!.status, '5.1.1');
  assert.match(gmail.recipients[0]!.diagnostic!, /^550-5\.1\.1 The email account .* unnecessary spaces\./);
  const microsoft = await readReport(fixture('microsoft-ndr.eml'));
  assert.equal(microsoft.kind, 'delivery-status');
  if (microsoft.kind !== 'delivery-status') return;
  assert.deepEqual(
    microsoft.recipients.map((r) => [r.finalRecipient, r.action, r.status]),
    [['no.one@contoso.example', 'failed', '5.1.10']],
    'read from a base64 delivery-status part',
  );
  assert.equal(microsoft.originalMessageId, '<msg_01microsoftfixture@example.com>');
});

test('an ARF complaint (RFC 5965)', async () => {
  assert.deepEqual(await readReport(fixture('arf-complaint.eml')), {
    kind: 'feedback',
    feedbackType: 'abuse',
    originalRecipient: 'complainer@example.org',
    userAgent: 'SomeGenerator/1.0',
    originalMessageId: '<msg_01arffixture@example.com>',
    originalReturnPath: 'bounce+01m83abcdefghjkmnpqrstvwxyztag0000000@bounces.example.test',
  });
});

test('an auto-reply is not a bounce', async () => {
  assert.deepEqual(await readReport(fixture('vacation-auto-reply.eml')), {
    kind: 'auto-reply',
    reason: 'Auto-Submitted: auto-replied',
  });
});

test('odd input is unreadable, never an exception', async () => {
  const cases: Array<[string, Buffer, string]> = [
    ['empty', Buffer.alloc(0), 'no header fields'],
    [
      'binary garbage',
      Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919) % 256)),
      'neither a delivery report nor a feedback report',
    ],
    [
      'a plain message',
      Buffer.from('From: a@b.example\nSubject: hi\n\nhello\n'),
      'neither a delivery report nor a feedback report',
    ],
    [
      'a report without its parts',
      Buffer.from(
        'Content-Type: multipart/report; report-type=delivery-status; boundary=x\n\nnothing here\n',
      ),
      'a delivery-status report without its message/delivery-status part',
    ],
    [
      'a report naming no recipient',
      Buffer.from(
        'Content-Type: multipart/report; report-type=delivery-status; boundary=x\n\n--x\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; a\n\n--x--\n',
      ),
      'a delivery-status report naming no recipient',
    ],
    [
      'another report type',
      Buffer.from('Content-Type: multipart/report; report-type=disposition-notification; boundary=x\n\n'),
      'a report of type disposition-notification',
    ],
    [
      'a feedback report without its type',
      Buffer.from(
        'Content-Type: multipart/report; report-type=feedback-report; boundary=x\n\n--x\nContent-Type: message/feedback-report\n\nUser-Agent: x\n\n--x--\n',
      ),
      'a feedback report without a Feedback-Type',
    ],
  ];
  for (const [name, input, reason] of cases) {
    // Each exactly: unreadable, and why (an auto-reply or a bounce read from junk would be a misreading).
    assert.deepEqual(await readReport(input), { kind: 'unreadable', reason }, name);
  }
  // 20 MB of one header line: refused at the header cap, still no exception.
  const huge = Buffer.concat([
    Buffer.from('Subject: '),
    Buffer.alloc(20 * 1024 * 1024, 0x61),
    Buffer.from('\n\nx'),
  ]);
  const refused = await readReport(huge);
  assert.equal(refused.kind, 'unreadable');
  assert.match(refused.kind === 'unreadable' ? refused.reason : '', /header block over 64 KiB/);
});

test('a report a gateway wrapped in multipart/mixed, its notice a multipart/alternative: read three levels down', async () => {
  assert.deepEqual(await readMessage(fixture('nested-gateway-bounce.eml')), {
    report: {
      kind: 'delivery-status',
      reportingMta: 'EXCH01.corp.example.de',
      envelopeId: null,
      originalMessageId: '<msg_01nestedfixture@example.com>',
      recipients: [
        {
          finalRecipient: 'j.mueller@corp.example.de',
          originalRecipient: 'j.mueller@corp.example.de',
          action: 'failed',
          status: '5.1.1',
          diagnostic: '550 5.1.1 RESOLVER.ADR.RecipNotFound; Empfänger nicht gefunden',
          remoteMta: null,
        },
      ],
    },
    // An RFC 2047 word (UTF-8, base64), decoded.
    subject: 'Unzustellbar: Ihre Bestellung für März',
  });
});

test('a Latin-1 report: its ISO-8859-1 subject, 8-bit delivery-status part and quoted-printable headers, decoded', async () => {
  assert.deepEqual(await readMessage(fixture('latin1-bounce.eml')), {
    report: {
      kind: 'delivery-status',
      reportingMta: 'mail.beispiel.example',
      envelopeId: null,
      originalMessageId: '<msg_01latin1fixture@example.com>',
      recipients: [
        {
          finalRecipient: 'info@beispiel.example',
          originalRecipient: 'info@beispiel.example',
          action: 'failed',
          status: '5.1.1',
          diagnostic: '550 5.1.1 Empfänger unbekannt / Adresse ungültig',
          remoteMta: 'mx.beispiel.example',
        },
      ],
    },
    subject: 'Unzustellbare Nachricht: Ihre Bestellung für März',
  });
});

test('an ARF complaint whose subject is two folded encoded words in two charsets', async () => {
  assert.deepEqual(await readMessage(fixture('arf-encoded-subject.eml')), {
    report: {
      kind: 'feedback',
      feedbackType: 'abuse',
      originalRecipient: 'anna@mail.example.net',
      userAgent: 'ExampleFBL/2.1',
      originalMessageId: '<msg_01arfencodedfixture@example.com>',
      // Joined across a quoted-printable soft line break.
      originalReturnPath: 'bounce+01m83abcdefghjkmnpqrstvwxyztag0000000@bounces.example.test',
    },
    subject: 'Beschwerde über eine Nachricht für Sie',
  });
  // The subject of a plain fixture is as it was, and cut to 200 characters.
  assert.equal(
    (await readMessage(fixture('exim-bounce.eml'))).subject,
    'Mail delivery failed: returning message to sender',
  );
  const long = await readMessage(Buffer.from(`Subject: ${'x'.repeat(300)}\n\nbody\n`));
  assert.equal(long.subject, 'x'.repeat(200));
});

test('each cap refuses the message as unreadable, with why, after bounded work', async () => {
  const cases: Array<[string, Buffer, RegExp]> = [
    ['parts', partsBomb(100_000), /^more than 100 MIME parts$/],
    ['parts, nested', depthBomb(5000), /^more than 100 MIME parts$/],
    ['depth', depthBomb(REPORT_LIMITS.depth + 1), /^parts nested more than 8 levels deep$/],
    ['header lines', headerLinesBomb(100_000), /^a header block over 64 KiB/],
    ['header bytes', headerBytesBomb(1024 * 1024), /^a header block over 64 KiB/],
    ['a delivery-status part', groupsBomb(10_000), /^a message\/delivery-status part over 64 KiB$/],
    [
      // Under the per-block cap, over the message's: many short header lines, each of 64 bytes or so.
      'header and field lines in all',
      Buffer.from(
        `${Array.from({ length: 900 }, (_, i) => `X-Trace-${i}: ${'t'.repeat(40)}`).join('\n')}\n` +
          'Content-Type: multipart/report; report-type=delivery-status; boundary=x\n\n--x\n' +
          `Content-Type: message/delivery-status\n\nReporting-MTA: dns; a\n\n${'Final-Recipient: rfc822; a@b.example\nAction: failed\n\n'.repeat(100)}--x--\n`,
      ),
      /^more than 1000 header and field lines$/,
    ],
  ];
  for (const [name, input, reason] of cases) {
    const { report } = await readMessage(input);
    // Refused at the cap, and saying which cap.
    assert.equal(report.kind, 'unreadable', name);
    assert.match(report.kind === 'unreadable' ? report.reason : '', reason, name);
  }
  // Just under the depth cap is read: a part 8 levels down is no reason to refuse.
  const deep = await readMessage(depthBomb(REPORT_LIMITS.depth - 1));
  assert.deepEqual(deep.report, {
    kind: 'unreadable',
    reason: 'neither a delivery report nor a feedback report',
  });
});
