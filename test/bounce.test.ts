import assert from 'node:assert/strict';
import { test } from 'node:test';
import { classifyBounce } from '../src/modules/emails/bounce.ts';

// How a permanent refusal is classified (RFC 3463 enhanced status codes), as email.bounced reports it.

test('bounces are classified by their enhanced status code', () => {
  const cases: Array<[string | null, string, string | null, { noSuchDomain?: boolean }?]> = [
    ['550 5.1.1 <a@example.org>: Recipient address rejected: User unknown', 'hard', '5.1.1'],
    ['550-5.1.1 The email account that you tried to reach does not exist.', 'hard', '5.1.1'],
    ['550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found', 'hard', '5.1.10'],
    ['550 5.2.1 The email account is disabled', 'hard', '5.2.1'],
    ['554 5.4.4 SMTPSEND.DNS.NonExistentDomain', 'hard', '5.4.4'],
    ['552 5.2.2 Mailbox full', 'soft', '5.2.2'],
    ['552 5.3.4 Message too big for system', 'soft', '5.3.4'],
    ['550 5.7.1 Message rejected due to DMARC policy', 'policy', '5.7.1'],
    ['550 5.7.26 Unauthenticated email is not accepted', 'policy', '5.7.26'],
    ['421 4.7.0 Try again later', 'soft', '4.7.0'],
    ['550 Requested action not taken: mailbox unavailable', 'undetermined', null],
    ['554 5.6.0 Message content rejected', 'undetermined', '5.6.0'],
    [null, 'hard', null, { noSuchDomain: true }],
    [null, 'undetermined', null],
  ];
  for (const [reply, type, status, options] of cases) {
    const bounce = classifyBounce(reply, options);
    assert.deepEqual(bounce, { type, status, diagnostic: reply, reporting_mta: null }, String(reply));
  }
  assert.equal(
    classifyBounce('550 5.1.1 x', { reportingMta: 'mx.example.org' }).reporting_mta,
    'mx.example.org',
  );
});
