import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  destinationOf,
  parseDestinationOverrides,
  PROVIDERS,
  UNKNOWN_LIMITS,
} from '../src/modules/destinations/providers.ts';
import { classifyResponse, RESPONSE_RULES } from '../src/modules/destinations/responses.ts';
import { createDestinationShaping } from '../src/modules/destinations/shaping.ts';

test('each classified reply of the table is classified as its rule', () => {
  for (const rule of RESPONSE_RULES) assert.equal(classifyResponse(rule.example), rule, rule.example);
  assert.equal(classifyResponse(RESPONSE_RULES[0]!.example)?.kind, 'rate', "Gmail's 4.7.28");
  assert.equal(classifyResponse(RESPONSE_RULES[1]!.example)?.source, 'Yahoo/AOL');
  assert.equal(
    classifyResponse('421 4.7.0 [TS03] All messages from 192.0.2.1 will be permanently deferred')?.source,
    'Yahoo/AOL',
  );
  assert.equal(
    classifyResponse('451 4.7.500 Server busy. Please try again later from [192.0.2.1]. (S3150)')?.source,
    'Microsoft',
  );
  assert.equal(
    classifyResponse(
      '421 4.3.2 The maximum number of concurrent server connections has exceeded a limit, closing transmission channel (too many connections)',
    )?.kind,
    'connections',
  );
  assert.equal(
    classifyResponse('421 Service not available, closing transmission channel')?.kind,
    'reputation',
  );
});

test('replies about the message, not the pace, are not throttles', () => {
  for (const reply of [
    '451 4.3.0 Greylisted, come back later',
    '450 4.7.1 <a@b.example>: Recipient address rejected: Greylisted for 5 minutes',
    '452 4.2.2 The email account that you tried to reach is over quota',
    '550 5.7.28 rate limited', // permanent: a bounce, not a deferral
    '250 2.0.0 OK',
    null,
  ]) {
    assert.equal(classifyResponse(reply), undefined, String(reply));
  }
});

test('MX hosts roll up to their provider; any other MX set is its own destination', () => {
  assert.equal(destinationOf('example.com', ['aspmx.l.google.com', 'alt1.aspmx.l.google.com']).key, 'google');
  assert.equal(destinationOf('gmail.com', ['gmail-smtp-in.l.google.com.']).key, 'google');
  assert.equal(destinationOf('contoso.com', ['contoso-com.mail.protection.outlook.com']).key, 'microsoft');
  assert.equal(destinationOf('aol.com', ['mx-aol.mail.gm0.yahoodns.net']).key, 'yahoo');
  assert.equal(destinationOf('web.de', ['mx-ha03.web.de']).key, 'gmx');
  assert.equal(destinationOf('icloud.com', ['mx01.mail.icloud.com']).key, 'apple');
  const other = destinationOf('shop.example', ['mx2.shop.example', 'MX1.shop.example.']);
  assert.deepEqual(other, {
    key: 'mx1.shop.example,mx2.shop.example',
    provider: null,
    limits: UNKNOWN_LIMITS,
  });
  assert.equal(destinationOf('bare.example', []).key, 'bare.example');
  assert.deepEqual(destinationOf('x.example', ['aspmx.l.google.com']).limits, PROVIDERS[0]!.limits);
});

test('operator overrides by provider, MX pattern or domain', () => {
  const overrides = parseDestinationOverrides('google=2//100 *.shop.example=1/5/10/100;vip.example=//0');
  assert.ok(Array.isArray(overrides));
  assert.deepEqual(destinationOf('a.example', ['aspmx.l.google.com'], overrides).limits, {
    ...PROVIDERS[0]!.limits,
    connections: 2,
    perMinute: 100,
  });
  assert.deepEqual(destinationOf('shop.example', ['mx.shop.example'], overrides).limits, {
    connections: 1,
    messagesPerConnection: 5,
    perMinute: 10,
    perHour: 100,
  });
  assert.equal(destinationOf('vip.example', ['aspmx.l.google.com'], overrides).limits.perMinute, 0);
  assert.match(String(parseDestinationOverrides('google')), /pattern=connections/);
  assert.match(String(parseDestinationOverrides('google=0')), /at least one connection/);
});

test('AIMD: a rate deferral halves what it took and suspends; a minute of deliveries adds back', () => {
  const shaping = createDestinationShaping();
  const { destination } = shaping.learn('shop.example', ['mx.shop.example'], 0);
  let now = 0;
  for (let i = 0; i < 20; i++) {
    assert.equal(shaping.startAt(destination, now, 0), now, 'no limit before a deferral');
    shaping.started(destination, now);
  }
  const throttled = shaping.observe('shop.example', RESPONSE_RULES[0]!.example, false, now, 0)!;
  assert.equal(throttled.rate, 10);
  assert.equal(throttled.suspendedUntil, 60_000);
  assert.equal(shaping.startAt(destination, now, 0), 60_000, 'suspended');
  // A second reply of the same burst cuts nothing more.
  assert.equal(shaping.observe('shop.example', RESPONSE_RULES[0]!.example, false, now, 0)!.rate, 10);
  now = 60_000;
  assert.equal(shaping.startAt(destination, now, 0), now);
  shaping.started(destination, now);
  assert.equal(shaping.startAt(destination, now, 0), 66_000, 'paced at 10 a minute after the back-off');
  now = 66_000;
  shaping.observe('shop.example', '250 ok', true, now, 0);
  assert.equal(shaping.known()[0]!.rate, 11, 'additive increase, a minute after the decrease');
  now = 100_000;
  shaping.observe('shop.example', '250 ok', true, now, 0);
  assert.equal(shaping.known()[0]!.rate, 11, 'not before another minute');
  now = 126_000;
  shaping.observe('shop.example', '250 ok', true, now, 0);
  assert.equal(shaping.known()[0]!.rate, 12);
  // Connections: the others still open when one was refused.
  shaping.observe('shop.example', '421 4.7.0 Too many connections', false, now, 2);
  assert.equal(shaping.known()[0]!.connections, 2);
  assert.equal(shaping.startAt(destination, now, 2), Infinity);
});

test('shared state is written on a change, at most once a second per destination', () => {
  const shaping = createDestinationShaping();
  shaping.learn('shop.example', ['mx.shop.example'], 0);
  assert.equal(shaping.takeWrites(0).length, 1, 'a new destination');
  assert.deepEqual(shaping.takeWrites(2000), []);
  shaping.observe('shop.example', RESPONSE_RULES[0]!.example, false, 3000, 0);
  assert.equal(shaping.takeWrites(3000).length, 1);
  shaping.observe('shop.example', RESPONSE_RULES[0]!.example, false, 3500, 0);
  assert.deepEqual(shaping.takeWrites(3500), [], 'within the second');
  assert.equal(shaping.takeWrites(4000).length, 1);
  assert.deepEqual(shaping.takeWrites(9000), [], 'nothing changed');
});
