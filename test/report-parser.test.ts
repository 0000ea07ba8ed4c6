import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { readReport } from '../src/modules/inbound/report-parser.ts';

// The report reader over real and real-shaped reports (test/fixtures/reports/README.md says where each
// came from), and over input that is no report at all.

const fixture = (name: string) => readFileSync(new URL(`./fixtures/reports/${name}`, import.meta.url));

test('Postfix: a bounce, a success and a delay report, as Postfix wrote them', () => {
  assert.deepEqual(readReport(fixture('postfix-bounce-unknown-user.eml')), {
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
  const success = readReport(fixture('postfix-success.eml'));
  assert.equal(success.kind, 'delivery-status');
  if (success.kind !== 'delivery-status') return;
  assert.deepEqual(
    success.recipients.map((r) => [r.finalRecipient, r.action, r.status]),
    [['root@postwire.test', 'delivered', '2.0.0']],
  );
  assert.equal(success.originalMessageId, '<msg_01fixturesuccess@postwire.test>');
  const delay = readReport(fixture('postfix-delay.eml'));
  assert.equal(delay.kind, 'delivery-status');
  if (delay.kind !== 'delivery-status') return;
  assert.deepEqual(
    delay.recipients.map((r) => [r.finalRecipient, r.action, r.status, r.diagnostic]),
    [['later@slow.test', 'delayed', '4.4.1', 'connect to 127.0.0.1[127.0.0.1]:1: Connection refused']],
  );
});

test('Exim, Gmail and Exchange Online bounces', () => {
  const exim = readReport(fixture('exim-bounce.eml'));
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
  const gmail = readReport(fixture('gmail-bounce.eml'));
  assert.equal(gmail.kind, 'delivery-status');
  if (gmail.kind !== 'delivery-status') return;
  assert.equal(gmail.originalMessageId, '<msg_01gmailfixture@example.com>');
  assert.equal(gmail.recipients[0]!.status, '5.1.1');
  assert.match(gmail.recipients[0]!.diagnostic!, /^550-5\.1\.1 The email account .* unnecessary spaces\./);
  const microsoft = readReport(fixture('microsoft-ndr.eml'));
  assert.equal(microsoft.kind, 'delivery-status');
  if (microsoft.kind !== 'delivery-status') return;
  assert.deepEqual(
    microsoft.recipients.map((r) => [r.finalRecipient, r.action, r.status]),
    [['no.one@contoso.example', 'failed', '5.1.10']],
    'read from a base64 delivery-status part',
  );
  assert.equal(microsoft.originalMessageId, '<msg_01microsoftfixture@example.com>');
});

test('an ARF complaint (RFC 5965)', () => {
  assert.deepEqual(readReport(fixture('arf-complaint.eml')), {
    kind: 'feedback',
    feedbackType: 'abuse',
    originalRecipient: 'complainer@example.org',
    userAgent: 'SomeGenerator/1.0',
    originalMessageId: '<msg_01arffixture@example.com>',
    originalReturnPath: 'bounce+01m83abcdefghjkmnpqrstvwxyztag0000000@bounces.example.test',
  });
});

test('an auto-reply is not a bounce', () => {
  assert.deepEqual(readReport(fixture('vacation-auto-reply.eml')), {
    kind: 'auto-reply',
    reason: 'Auto-Submitted: auto-replied',
  });
});

test('odd input is unreadable, never an exception', () => {
  const cases: Array<[string, Buffer, RegExp]> = [
    ['empty', Buffer.alloc(0), /no header fields/],
    ['binary garbage', Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919) % 256)), /./],
    ['a plain message', Buffer.from('From: a@b.example\nSubject: hi\n\nhello\n'), /neither/],
    [
      'a report without its parts',
      Buffer.from(
        'Content-Type: multipart/report; report-type=delivery-status; boundary=x\n\nnothing here\n',
      ),
      /without its message\/delivery-status part/,
    ],
    [
      'a report naming no recipient',
      Buffer.from(
        'Content-Type: multipart/report; report-type=delivery-status; boundary=x\n\n--x\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; a\n\n--x--\n',
      ),
      /naming no recipient/,
    ],
    [
      'another report type',
      Buffer.from('Content-Type: multipart/report; report-type=disposition-notification; boundary=x\n\n'),
      /disposition-notification/,
    ],
    [
      'a feedback report without its type',
      Buffer.from(
        'Content-Type: multipart/report; report-type=feedback-report; boundary=x\n\n--x\nContent-Type: message/feedback-report\n\nUser-Agent: x\n\n--x--\n',
      ),
      /without a Feedback-Type/,
    ],
  ];
  for (const [name, input, reason] of cases) {
    const report = readReport(input);
    assert.equal(report.kind === 'unreadable' || report.kind === 'auto-reply', true, name);
    if (report.kind === 'unreadable') assert.match(report.reason, reason, name);
  }
  // 20 MB of one header line: read in linear time, still no exception.
  const huge = Buffer.concat([
    Buffer.from('Subject: '),
    Buffer.alloc(20 * 1024 * 1024, 0x61),
    Buffer.from('\n\nx'),
  ]);
  assert.equal(readReport(huge).kind, 'unreadable');
});
