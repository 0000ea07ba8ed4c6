import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { createConnection } from 'node:net';
import { describe, test } from 'node:test';
import { simpleParser } from 'mailparser';
import nodemailer from 'nodemailer';
import { postfixAvailable, startPostfix, type TestPostfix } from './helpers/postfix.ts';
import { startSmtpServer } from './helpers/smtp.ts';
import { until } from './helpers/until.ts';

// The Postfix helper is the receiving side other tests trust: a message sent to it must land in the
// recipient's Maildir as Postfix wrote it, parse back to the same text and attachment bytes, stay out of
// other recipients' mailboxes, never be relayed, and close() must leave nothing of the instance behind.
// With `users` and `relay` it is also the mail host that reports back: its delivery status notifications
// must reach the next hop the transport map names, and only that one.

const skip = postfixAvailable()
  ? false
  : 'needs Postfix (/usr/sbin/postfix; apt-get install -y postfix) and root to run a private instance';

const sender = (postfix: TestPostfix) =>
  nodemailer.createTransport({
    host: '127.0.0.1',
    port: postfix.port,
    secure: false,
    ignoreTLS: true,
    name: 'sender.test',
  });

const text = ['Hello Ada,', '', 'three lines of text,', 'grüße, and a last one.', '', '-- ', 'Bob'].join(
  '\n',
);

function processesIn(directory: string): number[] {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .filter((entry) => {
      try {
        return readlinkSync(`/proc/${entry}/cwd`).startsWith(directory);
      } catch {
        return false;
      }
    })
    .map(Number);
}

// Exited: no such process, or a zombie its parent has yet to reap.
function running(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    socket.on('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('error', () => resolve(false));
  });
}

describe('Postfix helper', { skip }, () => {
  test('delivers a message with an attachment into the Maildir, byte for byte, and closes clean', async () => {
    const postfix = await startPostfix({ domains: ['receiver.test'] });
    const { directory, masterPid, port } = postfix;
    try {
      const attachment = randomBytes(30_000);
      const transport = sender(postfix);
      const info = await transport.sendMail({
        from: 'bob@sender.test',
        to: 'ada@receiver.test',
        subject: 'Numbers, with a file',
        text,
        attachments: [
          { filename: 'numbers.bin', content: attachment, contentType: 'application/octet-stream' },
        ],
      });
      assert.deepEqual(info.accepted, ['ada@receiver.test']);
      transport.close();

      const [raw, ...more] = await postfix.waitForMailbox('ada@receiver.test', 1);
      assert.ok(raw);
      assert.equal(more.length, 0);
      // What Postfix itself wrote in front of the message.
      const head = raw.toString('utf8', 0, raw.indexOf('\n\n'));
      assert.match(head, /^Return-Path: <bob@sender\.test>\n/);
      assert.match(head, /^Delivered-To: ada@receiver\.test$/m);
      assert.match(
        head,
        /^Received: from sender\.test \(unknown \[127\.0\.0\.1\]\)\n\tby mx\.receiver\.test/m,
      );

      const parsed = await simpleParser(raw);
      assert.equal(parsed.subject, 'Numbers, with a file');
      assert.equal(parsed.text?.trimEnd(), text);
      assert.equal(parsed.attachments.length, 1);
      assert.equal(parsed.attachments[0]?.filename, 'numbers.bin');
      assert.ok(parsed.attachments[0]?.content.equals(attachment), 'the attachment arrives byte for byte');
    } finally {
      await postfix.close();
    }
    assert.equal(existsSync(directory), false, 'close() removes the directory');
    assert.deepEqual(processesIn(directory), [], 'no process of the instance is left');
    assert.equal(running(masterPid), false, `the master (pid ${masterPid}) has exited`);
    assert.equal(await accepts(port), false, 'nothing listens on its port');
  });

  test('keeps mailboxes apart, refuses relaying, and runs beside another instance', async () => {
    const [first, second] = await Promise.all([
      startPostfix({ domains: ['receiver.test', 'Other.Example'] }),
      startPostfix({ domains: ['receiver.test'] }),
    ]);
    try {
      assert.notEqual(first.port, second.port);
      const transport = sender(first);
      await transport.sendMail({ from: 'x@sender.test', to: 'bob@receiver.test', subject: 'to bob', text });
      await transport.sendMail({ from: 'x@sender.test', to: 'Ada@other.example', subject: 'to ada', text });
      await assert.rejects(
        transport.sendMail({ from: 'x@sender.test', to: 'eve@elsewhere.test', subject: 'relay?', text }),
        /Relay access denied/,
      );
      transport.close();
      const again = sender(second);
      await again.sendMail({ from: 'x@sender.test', to: 'ada@receiver.test', subject: 'second', text });
      again.close();

      const [toBob] = await first.waitForMailbox('bob@receiver.test', 1);
      const [toAda] = await first.waitForMailbox('ada@other.example', 1);
      assert.match(String(toBob), /^Subject: to bob$/m);
      assert.match(String(toAda), /^Subject: to ada$/m);
      const [inSecond] = await second.waitForMailbox('ada@receiver.test', 1);
      assert.match(String(inSecond), /^Subject: second$/m);
      // Bob's message reached neither Ada's mailbox nor the other instance: each message above has landed
      // where it belongs, and Postfix delivers a recipient's copy once, so what is there now is all there is.
      assert.deepEqual(await first.waitForMailbox('ada@receiver.test', 0), []);
      assert.deepEqual(await second.waitForMailbox('bob@receiver.test', 0), []);
      // A wait that runs out says what it got and shows Postfix's log.
      await assert.rejects(first.waitForMailbox('ada@receiver.test', 1, 1), /got 0; Postfix log/);
      assert.match(first.log(), /NOQUEUE: reject: RCPT from .*Relay access denied/);
      await assert.rejects(first.waitForMailbox('eve@elsewhere.test', 1), /not at this instance's domains/);
    } finally {
      await Promise.all([first.close(), second.close()]);
    }
  });

  test('bounces unknown users after accepting them, and mails its reports to the relay it is given', async () => {
    const [first, second] = await Promise.all([
      startSmtpServer({ dsn: true }),
      startSmtpServer({ dsn: true }),
    ]);
    const postfix = await startPostfix({
      domains: ['receiver.test'],
      users: ['Ada'],
      relay: { 'Sender.Test': `127.0.0.1:${first.port}` },
    });
    try {
      const send = async (to: string, notify: Array<'success' | 'failure' | 'delay'>) => {
        const transport = sender(postfix);
        const info = await transport.sendMail({
          envelope: { from: 'bob@sender.test', to },
          from: 'bob@sender.test',
          to,
          subject: `to ${to}`,
          text,
          dsn: { id: `env-${to}`, return: 'headers', notify, recipient: to },
        });
        transport.close();
        return info;
      };

      // Taken at RCPT (no 550 for the client to see), then bounced by virtual(8).
      const info = await send('nobody@receiver.test', ['failure']);
      assert.deepEqual(info.accepted, ['nobody@receiver.test']);
      const [bounce] = await first.waitFor(1, 20_000);
      assert.ok(bounce);
      assert.equal(bounce.from, '', 'a report comes from the null sender');
      assert.deepEqual(bounce.to, ['bob@sender.test']);
      assert.match(bounce.raw, /^Subject: Undelivered Mail Returned to Sender\r$/m);
      assert.match(bounce.raw, /^Content-Type: multipart\/report; report-type=delivery-status;/m);
      assert.match(bounce.raw, /^Original-Envelope-Id: env-nobody@receiver\.test\r$/m);
      assert.match(
        bounce.raw,
        /^Final-Recipient: rfc822; nobody@receiver\.test\r\nOriginal-Recipient: .*\r\nAction: failed\r\nStatus: 5\.1\.1\r$/m,
      );
      // postlogd writes the log from datagrams, possibly after the report is out: wait for the line.
      await until(
        () =>
          /postfix\/virtual\[.* to=<nobody@receiver\.test>.* status=bounced \(unknown user/.test(
            postfix.log(),
          ),
        5000,
        "virtual(8)'s log of the bounce",
      );

      // Another next hop for the domain, from now on; Ada, a listed user, is delivered and told about.
      await postfix.setRelay({ 'sender.test': `127.0.0.1:${second.port}` });
      await send('ada@receiver.test', ['success', 'failure']);
      const [toAda] = await postfix.waitForMailbox('ada@receiver.test', 1);
      assert.match(String(toAda), /^Subject: to ada@receiver\.test$/m);
      const [success] = await second.waitFor(1, 20_000);
      assert.ok(success);
      assert.match(success.raw, /^Subject: Successful Mail Delivery Report\r$/m);
      assert.match(
        success.raw,
        /^Final-Recipient: rfc822; ada@receiver\.test\r\nOriginal-Recipient: .*\r\nAction: delivered\r\nStatus: 2\.0\.0\r$/m,
      );
      assert.equal(first.messages.length, 1, 'the first relay got nothing after the change');
      // The map routes what Postfix sends, and opens no relay for its clients.
      await assert.rejects(send('eve@sender.test', ['failure']), /Relay access denied/);
      // Refused at RCPT: nothing was queued, so nothing can arrive later.
      assert.deepEqual(await postfix.waitForMailbox('nobody@receiver.test', 0), []);

      await assert.rejects(
        startPostfix({ domains: ['receiver.test'], users: ['a b'] }),
        /not a plain local part/,
      );
      await assert.rejects(
        startPostfix({ domains: ['receiver.test'], relay: { 'sender.test': '127.0.0.1' } }),
        /must be host:port/,
      );
    } finally {
      await postfix.close();
      await Promise.all([first.close(), second.close()]);
    }
  });
});
