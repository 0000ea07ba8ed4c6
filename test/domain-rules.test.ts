import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { dkimRecordMatches } from '../src/modules/domains/dkim-key.ts';
import { normalizeDomainName, selfAndParents } from '../src/modules/domains/domain-name.ts';
import { aligned, domainSettingsFromConfig } from '../src/modules/domains/domains.service.ts';
import { evaluate, expectedRecords, lookUp, type RecordCheck } from '../src/modules/domains/records.ts';

const domain = {
  name: 'acme.example',
  dkimSelector: 'pwold',
  dkimPublicKey: 'OLDKEY',
  nextDkimSelector: null,
  nextDkimPublicKey: null,
  challengeToken: 'TOKEN',
};
const withReturnPath = { returnPath: { mxHost: 'inbound.postwire.test', spf: 'v=spf1 ip4:192.0.2.1 -all' } };

const found = (values: string[] | null, matches: boolean, error?: string): RecordCheck => ({
  found: values,
  matches,
  ...(error ? { error } : {}),
});

test('a published DKIM record matches in any tag order and spacing, only with the same key', () => {
  assert.equal(dkimRecordMatches('v=DKIM1; k=rsa; p=ABC', 'ABC'), true);
  assert.equal(dkimRecordMatches('p=A B\tC; v=DKIM1', 'ABC'), true, 'whitespace inside p= is folding');
  assert.equal(dkimRecordMatches('v=DKIM1; k=rsa; p=ABD', 'ABC'), false);
  assert.equal(dkimRecordMatches('v=DKIM1; k=ed25519; p=ABC', 'ABC'), false);
  assert.equal(dkimRecordMatches('v=DKIM2; p=ABC', 'ABC'), false);
  assert.equal(dkimRecordMatches('v=DKIM1; p=', 'ABC'), false, 'a revoked key');
});

test('the return path records appear only when per-recipient return paths are on', () => {
  const plain = expectedRecords(domain, {}).map(
    (record) => `${record.purpose} ${record.type} ${record.name}`,
  );
  assert.deepEqual(plain, ['dkim TXT pwold._domainkey.acme.example', 'dmarc TXT _dmarc.acme.example']);
  const full = expectedRecords(domain, withReturnPath).map((record) => `${record.type} ${record.name}`);
  assert.deepEqual(full, [
    'TXT pwold._domainkey.acme.example',
    'MX bounces.acme.example',
    'TXT bounces.acme.example',
    'TXT _dmarc.acme.example',
  ]);
  // Configuration: BOUNCE_DOMAIN and INBOUND_MX_HOST together turn them on.
  assert.equal(
    domainSettingsFromConfig(loadConfig({ BOUNCE_DOMAIN: 'b.postwire.test' })).returnPath,
    undefined,
  );
  assert.deepEqual(
    domainSettingsFromConfig(
      loadConfig({ BOUNCE_DOMAIN: 'b.postwire.test', INBOUND_MX_HOST: 'MX.Postwire.test.' }),
    ).returnPath,
    { mxHost: 'mx.postwire.test', spf: undefined },
  );
});

test('SPF matches only as the one SPF policy of the name; MX by host, in any case', () => {
  const [, mx, spf] = expectedRecords(domain, withReturnPath);
  assert.equal(mx!.matches(['10 INBOUND.postwire.test.']), true);
  assert.equal(mx!.matches(['10 other.example']), false);
  assert.equal(spf!.matches(['v=spf1  ip4:192.0.2.1   -all']), true);
  assert.equal(spf!.matches(['v=spf1 ip4:192.0.2.1 -all', 'v=spf1 -all']), false, 'two SPF records');
});

test('the challenge record: listed first when asked for, required, matching only as the one token there', async () => {
  assert.equal(
    expectedRecords(domain, {}).some((record) => record.purpose === 'challenge'),
    false,
  );
  const [challenge, dkim] = expectedRecords(domain, {}, true);
  assert.deepEqual(
    [challenge!.purpose, challenge!.type, challenge!.name, challenge!.value, challenge!.required],
    ['challenge', 'TXT', '_postwire-challenge.acme.example', 'postwire-verification=TOKEN', true],
  );
  assert.equal(dkim!.purpose, 'dkim');
  assert.equal(challenge!.matches(['postwire-verification=TOKEN']), true);
  assert.equal(challenge!.matches(['postwire-verification=OTHER']), false);
  assert.equal(
    challenge!.matches(['postwire-verification=TOKEN', 'postwire-verification=OTHER']),
    false,
    "two projects' tokens: neither",
  );
  assert.equal(challenge!.matches(['postwire-verification=TOKENX']), false);
  // Looked up among other TXT records at the name: only the tokens count, and are shown.
  const dns = {
    resolveTxt: async () => [['v=spf1 -all'], ['postwire-verification=', 'TOKEN']],
    resolveMx: async () => [],
  };
  assert.deepEqual(await lookUp(dns, challenge!), { found: ['postwire-verification=TOKEN'], matches: true });
  // Required: without it the domain is not verified, whatever else matches.
  const checked = expectedRecords(domain, {}, true).map((record) => ({
    record,
    check: found(['x'], record.purpose === 'dkim'),
  }));
  assert.equal(evaluate('pending', checked).status, 'failed', 'another value found at the challenge');
  checked[0]!.check = found(null, false);
  assert.equal(evaluate('pending', checked).status, 'pending');
  checked[0]!.check = found(['postwire-verification=TOKEN'], true);
  assert.equal(evaluate('pending', checked).status, 'verified');
});

test('status: verified when required records match; failed on another value or a lost verification', () => {
  const records = expectedRecords(domain, withReturnPath);
  const all = (check: (index: number) => RecordCheck) =>
    records.map((record, index) => ({ record, check: check(index) }));
  const none = all(() => found(null, false));
  assert.equal(evaluate('pending', none).status, 'pending');
  assert.equal(evaluate('verified', none).status, 'failed');
  assert.equal(evaluate('failed', none).status, 'failed');
  const matching = all((index) => found(['x'], records[index]!.purpose !== 'dmarc'));
  assert.equal(evaluate('pending', matching).status, 'verified', 'DMARC is not required');
  assert.equal(evaluate('pending', matching).returnPathVerified, true);
  const wrongKey = all((index) => found(['x'], index !== 0));
  assert.equal(evaluate('pending', wrongKey).status, 'failed');
  const noReturnPath = all((index) => (index === 0 ? found(['x'], true) : found(null, false)));
  assert.equal(evaluate('pending', noReturnPath).status, 'pending');
  const broken = all((index) => (index === 0 ? found(null, false, 'ETIMEOUT') : found(['x'], true)));
  assert.deepEqual(
    { status: evaluate('verified', broken).status, inconclusive: evaluate('verified', broken).inconclusive },
    { status: 'verified', inconclusive: true },
  );
});

test('a rotation switches keys once the new record matches, and only then', () => {
  const rotating = { ...domain, nextDkimSelector: 'pwnew', nextDkimPublicKey: 'NEWKEY' };
  const records = expectedRecords(rotating, {});
  assert.deepEqual(
    records.map((record) => [record.name, record.rotation, record.required]),
    [
      ['pwold._domainkey.acme.example', 'retiring', true],
      ['pwnew._domainkey.acme.example', 'next', false],
      ['_dmarc.acme.example', undefined, false],
    ],
  );
  const checks = (old: boolean, next: boolean) => [
    { record: records[0]!, check: found(old ? ['x'] : null, old) },
    { record: records[1]!, check: found(next ? ['y'] : null, next) },
    { record: records[2]!, check: found(null, false) },
  ];
  assert.deepEqual(
    { ...evaluate('verified', checks(true, false)), returnPathVerified: undefined },
    {
      status: 'verified',
      switchKey: false,
      inconclusive: false,
      returnPathVerified: undefined,
      receivingVerified: false,
    },
  );
  const switched = evaluate('verified', checks(false, true));
  assert.deepEqual([switched.status, switched.switchKey], ['verified', true], 'the old record may go');
});

test('a receiving domain lists its MX, which decides receiving_verified and never the status', () => {
  assert.equal(
    expectedRecords({ ...domain, receiving: true }, {}).some((record) => record.purpose === 'receiving'),
    false,
    'no MX to ask for without INBOUND_MX_HOST',
  );
  const settings = { receivingMxHost: 'mx.postwire.example' };
  assert.equal(
    expectedRecords({ ...domain, receiving: false }, settings).some(
      (record) => record.purpose === 'receiving',
    ),
    false,
    'a domain that does not receive is asked for no MX',
  );
  const records = expectedRecords({ ...domain, receiving: true }, settings);
  const mx = records.find((record) => record.purpose === 'receiving')!;
  assert.deepEqual(
    [mx.type, mx.name, mx.value, mx.priority, mx.required],
    ['MX', 'acme.example', 'mx.postwire.example', 10, false],
  );
  assert.equal(mx.matches(['10 mx.postwire.example.']), true);
  assert.equal(mx.matches(['10 MX.Postwire.Example']), true);
  assert.equal(mx.matches(['10 mx.postwire.example', '20 mx.other.example']), false, 'every MX must be ours');
  const evaluated = (mxMatches: boolean) =>
    evaluate(
      'verified',
      records.map((record) => ({
        record,
        check:
          record.purpose === 'receiving'
            ? found(mxMatches ? ['10 mx.postwire.example'] : null, mxMatches)
            : found(record.required ? ['x'] : null, record.required),
      })),
    );
  assert.deepEqual([evaluated(true).status, evaluated(true).receivingVerified], ['verified', true]);
  assert.deepEqual([evaluated(false).status, evaluated(false).receivingVerified], ['verified', false]);
});

test('names and alignment', () => {
  assert.deepEqual(selfAndParents('a.b.example'), ['a.b.example', 'b.example', 'example']);
  assert.equal(normalizeDomainName('Ünïcode.Example.').ok, true);
  assert.equal(aligned('acme.example', 'mail.acme.example'), true);
  assert.equal(aligned('acme.example', 'notacme.example'), false);
  assert.equal(aligned('postwire.test', 'acme.example'), false);
});

test('sending-domain settings: defaults and refusals', () => {
  assert.equal(loadConfig({}).senderDomains, 'any', 'capture mode');
  assert.equal(loadConfig({ SMTP_URL: 'smtp://relay.example:587' }).senderDomains, 'any', 'relay mode');
  assert.equal(loadConfig({ MAIL_TRANSPORT: 'direct' }).senderDomains, 'verified', 'direct mode');
  assert.equal(loadConfig({ MAIL_TRANSPORT: 'direct', SENDER_DOMAINS: 'any' }).senderDomains, 'any');
  assert.equal(loadConfig({}).domainRecheckMs, 6 * 3_600_000);
  assert.equal(loadConfig({ DOMAIN_RECHECK: '30m' }).domainRecheckMs, 1_800_000);
  assert.equal(loadConfig({}).directMxPort, 25);
  for (const [name, value, message] of [
    ['SENDER_DOMAINS', 'some', /SENDER_DOMAINS must be verified or any/],
    ['INBOUND_MX_HOST', 'not a host', /INBOUND_MX_HOST must be a host name/],
    ['SENDING_SPF', 'ip4:192.0.2.1', /SENDING_SPF must be an SPF record/],
    ['DOMAIN_RECHECK', '0', /DOMAIN_RECHECK must be from 1s to 30d/],
    ['DIRECT_MX_PORT', '0', /DIRECT_MX_PORT must be an integer/],
  ] as const) {
    assert.throws(() => loadConfig({ [name]: value }), message, name);
  }
});
