import assert from 'node:assert/strict';
import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { describe, test } from 'node:test';
import nodemailer from 'nodemailer';
import { dkimpyAvailable, dkimpyVerify } from './helpers/dkimpy.ts';

// The dkimpy helper is a verifier other tests trust to say "a receiver accepts this signature": it must
// pass what an independent signer (nodemailer's) signed, and fail, saying why, on a changed byte, a
// missing key or no signature at all.

const skip = dkimpyAvailable()
  ? false
  : 'dkimpy is not importable by /usr/bin/python3: install it with apt-get install -y python3-dkim';

interface TestKey {
  privateKey: KeyObject;
  txt: string;
}

function rsaKey(): TestKey {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const p = publicKey.export({ type: 'spki', format: 'der' }).toString('base64');
  return { privateKey, txt: `v=DKIM1; k=rsa; p=${p}` };
}

async function signed(
  keys: Array<{ domainName: string; keySelector: string; privateKey: KeyObject }>,
  subject = 'Quarterly numbers',
): Promise<Buffer> {
  // CRLF as on the wire; the message spans many lines, a long folded header and a non-ASCII body.
  const transport = nodemailer.createTransport({
    streamTransport: true,
    buffer: true,
    newline: 'windows',
    dkim: { keys },
  });
  const info = await transport.sendMail({
    from: 'Ada <ada@acme.example>',
    to: 'bob@receiver.test',
    subject,
    text: [
      'Hello Bob,',
      '',
      'the numbers are attached below, line by line:',
      ...Array.from({ length: 40 }, (_, i) => `row ${i}: ${'x'.repeat(i)} grüße`),
      '',
      '-- ',
      'Ada',
    ].join('\n'),
    html: '<p>Hello <b>Bob</b></p>',
  });
  return info.message as Buffer;
}

describe('dkimpy helper', { skip }, () => {
  const acme = rsaKey();
  const other = rsaKey();
  const keys = {
    'sel._domainkey.acme.example': acme.txt,
    'two._domainkey.other.example': other.txt,
  };
  const acmeKey = { domainName: 'acme.example', keySelector: 'sel', privateKey: acme.privateKey };

  test('passes a message nodemailer signed, and fails it once one body byte changes', async () => {
    const message = await signed([acmeKey]);
    const bodyStart = message.indexOf('\r\n\r\n') + 4;
    const row = message.indexOf('row 7', bodyStart);
    assert.ok(row > bodyStart, 'the body has the row to change');
    const tampered = Buffer.from(message);
    tampered[row + 4] = '8'.charCodeAt(0);

    const [good, bad] = await dkimpyVerify([message, tampered.toString('latin1')], keys);
    assert.deepEqual(good, { pass: true, detail: 'signature 0 (d=acme.example s=sel): pass' });
    assert.equal(bad?.pass, false);
    assert.match(bad?.detail ?? '', /body hash mismatch/);
  });

  test('fails on a changed signed header, a key not in DNS, and no signature, each saying why', async () => {
    const message = await signed([acmeKey]);
    const otherSubject = Buffer.from(
      message.toString('latin1').replace('Subject: Quarterly numbers', 'Subject: Quarterly Numbers'),
      'latin1',
    );
    assert.notDeepEqual(otherSubject, message);
    const unsigned = Buffer.from('From: a@acme.example\r\nSubject: hi\r\n\r\nbody\r\n');

    const results = await dkimpyVerify([otherSubject, message, unsigned], {
      'sel._domainkey.elsewhere.example': acme.txt,
    });
    assert.deepEqual(
      results.map((result) => result.pass),
      [false, false, false],
    );
    assert.match(results[0]?.detail ?? '', /signature 0 \(d=acme\.example s=sel\)/);
    assert.match(results[1]?.detail ?? '', /missing public key/i);
    assert.equal(results[2]?.detail, 'no DKIM-Signature header');
  });

  test('checks every signature: two pass together, and one unverifiable fails the message', async () => {
    const otherKey = { domainName: 'other.example', keySelector: 'two', privateKey: other.privateKey };
    const twice = await signed([acmeKey, otherKey]);
    assert.equal(twice.toString('latin1').match(/^DKIM-Signature:/gim)?.length, 2);

    const [both] = await dkimpyVerify([twice], keys);
    const [oneKeyKnown] = await dkimpyVerify([twice], { 'sel._domainkey.acme.example': acme.txt });
    assert.equal(both?.pass, true, both?.detail);
    assert.match(both?.detail ?? '', /d=acme\.example s=sel\): pass/);
    assert.match(both?.detail ?? '', /d=other\.example s=two\): pass/);
    assert.equal(oneKeyKnown?.pass, false);
    assert.match(oneKeyKnown?.detail ?? '', /d=other\.example s=two\): did not verify/);
  });

  test('verifies a batch of 300 in one python process, in order, LF-only copies included', async (t) => {
    const message = await signed([acmeKey], 'Batch');
    // Maildir files (what Postfix writes) end lines with LF alone: dkimpy reads either.
    const unix = Buffer.from(message.toString('latin1').replaceAll('\r\n', '\n'), 'latin1');
    const tampered = Buffer.from(message.toString('latin1').replace('row 3:', 'row 3;'), 'latin1');
    const batch = Array.from({ length: 300 }, (_, i) => (i === 123 ? tampered : i % 2 ? unix : message));
    const started = performance.now();
    const results = await dkimpyVerify(batch, keys);
    t.diagnostic(`300 messages verified in ${Math.round(performance.now() - started)} ms`);
    assert.equal(results.length, 300);
    results.forEach((result, i) => assert.equal(result.pass, i !== 123, `message ${i}: ${result.detail}`));
  });
});
