import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { createSecretBox } from '../src/lib/crypto.ts';
import { newId } from '../src/lib/ids.ts';
import { createReturnPath } from '../src/modules/emails/return-path.ts';

const returnPath = createReturnPath({
  domain: 'Bounces.Example.test',
  secretBox: createSecretBox(Buffer.alloc(32, 3)),
});

test('a return path names its recipient, in any case, and fits in a local part', () => {
  const id = newId('rcpt');
  const address = returnPath.forRecipient(id);
  const [local, domain] = address.split('@');
  assert.equal(domain, 'bounces.example.test');
  assert.ok(local!.length <= 64, `${local!.length} characters`);
  assert.equal(returnPath.recipientOf(address), id);
  assert.equal(returnPath.recipientOf(address.toUpperCase()), id, 'mail systems may change the case');
});

test('a forged or altered return path names nobody', () => {
  const id = newId('rcpt');
  const address = returnPath.forRecipient(id);
  const local = address.split('@')[0]!;
  const flipped = (at: number) =>
    `${local.slice(0, at)}${local[at] === '0' ? '1' : '0'}${local.slice(at + 1)}@bounces.example.test`;
  assert.equal(returnPath.recipientOf(flipped(local.length - 1)), undefined, 'another tag');
  assert.equal(
    returnPath.recipientOf(flipped('bounce+'.length + 3)),
    undefined,
    "someone else's id, old tag",
  );
  assert.equal(returnPath.isBounceDomain('other.example'), false);
  assert.equal(returnPath.isBounceDomain('BOUNCES.example.test.'), true);
  const otherKey = createReturnPath({
    domain: 'bounces.example.test',
    secretBox: createSecretBox(Buffer.alloc(32, 4)),
  });
  assert.equal(otherKey.recipientOf(address), undefined, "another server's key");
  for (const junk of [
    '',
    'bounce+@bounces.example.test',
    'bounce+x@bounces.example.test',
    'ada@example.org',
  ]) {
    assert.equal(returnPath.recipientOf(junk), undefined, junk);
  }
});

test("a sending domain's return path carries the same local part, and its tag verifies there", () => {
  const id = newId('rcpt');
  const onBounceDomain = returnPath.forRecipient(id);
  const onCustomer = returnPath.forRecipient(id, 'Bounces.Acme.example');
  assert.equal(onCustomer.split('@')[1], 'bounces.acme.example');
  assert.equal(onCustomer.split('@')[0], onBounceDomain.split('@')[0]);
  assert.equal(returnPath.recipientOf(onCustomer), id);
  const forged = onCustomer.replace(/.@/, (match) => `${match[0] === '0' ? '1' : '0'}@`);
  assert.equal(returnPath.recipientOf(forged), undefined);
});

test('BOUNCE_DOMAIN must be a domain name', () => {
  assert.equal(loadConfig({}).bounceDomain, undefined);
  assert.equal(loadConfig({ BOUNCE_DOMAIN: 'Bounces.Acme.example' }).bounceDomain, 'bounces.acme.example');
  assert.throws(() => loadConfig({ BOUNCE_DOMAIN: 'not a domain' }), /BOUNCE_DOMAIN must be a domain name/);
});
