import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { Resolver } from 'node:dns/promises';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import net from 'node:net';
import tls from 'node:tls';
import { after, before, describe, test } from 'node:test';
import { simpleParser } from 'mailparser';
import nodemailer from 'nodemailer';
import MailComposer from 'nodemailer/lib/mail-composer';
import { runCli } from '../src/cli.ts';
import { loadConfig } from '../src/config.ts';
import { sha256Hex } from '../src/lib/crypto.ts';
import { createRateLimiter } from '../src/http/rate-limit.ts';
import { createSmtpBodyMemory, type SmtpBodyMemory } from '../src/lib/smtp-data.ts';
import { silentWorkerLogger } from '../src/lib/worker-logger.ts';
import { startSubmissionListener } from '../src/modules/submission/submission.listener.ts';
import { type RunningServer, startServer } from '../src/server.ts';
import { dkimpyAvailable, dkimpyVerify } from './helpers/dkimpy.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';
import { BROWSER } from './helpers/engagement.ts';
import { type CorpusMessage, fidelityCorpus } from './helpers/mail-corpus.ts';
import { postfixAvailable, startPostfix, type TestPostfix } from './helpers/postfix.ts';
import {
  createProcessDatabase,
  submissionSmtpPort,
  type ProcessDatabase,
  requestJson,
  type ServerProcess,
  startServerProcess,
} from './helpers/process.ts';
import { assertContent, assertWireLines, mailauthVerdict } from './helpers/received-mail.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';
import { until } from './helpers/until.ts';

// SMTP submission: applications that speak only SMTP send through Postwire, and what they wrote is what
// arrives. The fidelity corpus, submitted by nodemailer over STARTTLS with an API key as the password, is
// relayed to a real Postfix and lands DKIM- and DMARC-valid (mailauth and dkimpy) and intact (mailparser);
// then the protocol's refusals, the options given as headers, a retried submission, a revoked key.

const KEY = 'pw_submission_test_key_0123456789';
const DOMAIN = 'acme.example';
const RECIPIENT = 'ada@receiver.test';
const BOUNCE_DOMAIN = 'bounces.postwire.test';

/** A corpus message as an application hands it to nodemailer. */
function asNodemailer(message: CorpusMessage) {
  const body = message.body as {
    subject: string;
    text?: string;
    html?: string;
    cc?: string[];
    reply_to?: string[];
    headers?: Record<string, string>;
    attachments?: Array<{ filename: string; content: string; content_type?: string; content_id?: string }>;
  };
  return {
    subject: body.subject,
    ...(body.text !== undefined ? { text: body.text } : {}),
    ...(body.html !== undefined ? { html: body.html } : {}),
    ...(body.cc ? { cc: body.cc } : {}),
    ...(body.reply_to ? { replyTo: body.reply_to } : {}),
    ...(body.headers ? { headers: body.headers } : {}),
    ...(body.attachments
      ? {
          attachments: body.attachments.map((attachment) => ({
            filename: attachment.filename,
            content: Buffer.from(attachment.content, 'base64'),
            ...(attachment.content_type ? { contentType: attachment.content_type } : {}),
            ...(attachment.content_id ? { cid: attachment.content_id } : {}),
          })),
        }
      : {}),
  };
}

/** A raw SMTP client on a socket: `say` writes a command and waits for the reply with that code. */
function rawSmtp(socket: net.Socket) {
  const lines: string[] = [];
  socket
    .setEncoding('utf8')
    .on('data', (chunk: string) => lines.push(...chunk.split('\r\n').filter(Boolean)));
  socket.on('error', () => {});
  const reply = async (code: string) =>
    until(
      () => lines.find((line) => /^\d{3} /.test(line) && (line.startsWith(`${code} `) || !code)),
      10_000,
      `a ${code || 'final'} reply (have ${JSON.stringify(lines)})`,
    );
  return {
    reply,
    /** Writes `command` and answers the next final reply's line, which must carry `code`. */
    async say(command: string, code: string): Promise<string> {
      lines.length = 0;
      socket.write(`${command}\r\n`);
      const line = await reply('');
      assert.ok(line.startsWith(`${code} `), `${command.slice(0, 40)}: ${line}`);
      return line;
    },
    write: (text: string) => socket.write(text),
  };
}

describe('SMTP submission', () => {
  let database: ProcessDatabase;
  let dns: TestDnsServer;
  let postfix: TestPostfix;
  let server: RunningServer;
  let certDir: string;
  let port: number;
  let tlsPort: number;
  const dkimKeys: Record<string, string> = {};

  const api = (method: string, pathname: string, body?: unknown) =>
    requestJson(`${server.url}${pathname}`, KEY, method, body);

  const client = (options: { tls?: 'starttls' | 'implicit' | 'none'; pass?: string; user?: string } = {}) => {
    const mode = options.tls ?? 'starttls';
    return nodemailer.createTransport({
      host: '127.0.0.1',
      port: mode === 'implicit' ? tlsPort : port,
      secure: mode === 'implicit',
      ...(mode === 'none' ? { ignoreTLS: true } : { requireTLS: mode === 'starttls' }),
      tls: { rejectUnauthorized: false },
      ...(options.pass === ''
        ? {}
        : { auth: { user: options.user ?? 'wordpress', pass: options.pass ?? KEY } }),
    });
  };

  const emailsTo = async (to: string) =>
    (await api('GET', `/v1/emails?recipient=${encodeURIComponent(to)}`)).body.data as Array<
      Record<string, any>
    >;

  before(async () => {
    if (!postfixAvailable()) throw new Error('a real Postfix is needed (as root): .ci/run installs postfix');
    database = await createProcessDatabase('sqlite');
    dns = await startDnsServer();
    postfix = await startPostfix({ domains: ['receiver.test'] });
    certDir = mkdtempSync(path.join(tmpdir(), 'postwire-submission-'));
    writeCertificate(certDir);
    server = await startServer(
      loadConfig({
        ...database.env,
        PORT: '0',
        POSTWIRE_BOOTSTRAP_KEY: KEY,
        POSTWIRE_ENCRYPTION_KEY: Buffer.alloc(32, 12).toString('hex'),
        SMTP_URL: `smtp://127.0.0.1:${postfix.port}`,
        // Postfix's success notices (NOTIFY=SUCCESS) come back to the return paths: email.delivered.
        SMTP_DSN: 'success,failure,delay',
        BOUNCE_DOMAIN,
        INBOUND_SMTP_PORT: '0',
        SENDER_DOMAINS: 'verified',
        DNS_SERVERS: dns.address,
        SUBMISSION_PORT: '0',
        SUBMISSION_TLS_PORT: '0',
        SUBMISSION_TLS_CERT: readFileSync(path.join(certDir, 'cert.pem'), 'utf8'),
        SUBMISSION_TLS_KEY: readFileSync(path.join(certDir, 'key.pem'), 'utf8'),
        SUBMISSION_MAX_BYTES: String(2 * 1024 * 1024),
        PUBLIC_URL: 'https://mail.acme.example',
        POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
        METRICS_TOKEN: 'metrics-token-for-the-submission-test',
        POSTWIRE_AUTH_FAILURE_LIMIT: '1000',
        LOG_LEVEL: 'silent',
      }),
      { worker: true, stdout: { write() {} } },
    );
    port = server.submission!.port!;
    tlsPort = server.submission!.tlsPort!;
    // Postfix learns where the return paths' domain is only now that the inbound listener has its port.
    await postfix.setRelay({ [BOUNCE_DOMAIN]: `127.0.0.1:${server.inboundPort}` });
    const created = await api('POST', '/v1/domains', { name: DOMAIN });
    for (const record of created.body.records) {
      if (record.type === 'TXT' && record.purpose === 'dkim') {
        dns.set(record.name, 'TXT', [{ type: 'TXT', text: record.value }]);
        dkimKeys[record.name] = record.value;
      }
    }
    dns.set(`_dmarc.${DOMAIN}`, 'TXT', [{ type: 'TXT', text: 'v=DMARC1; p=reject; adkim=r; aspf=r' }]);
    const verified = await api('POST', `/v1/domains/${created.body.id}/verify`);
    assert.equal(verified.body.status, 'verified', JSON.stringify(verified.body.records));
  });

  after(async () => {
    await server?.close();
    await postfix?.close();
    await dns?.close();
    await database?.cleanup();
    if (certDir) rmSync(certDir, { recursive: true, force: true });
  });

  test('the fidelity corpus, submitted over STARTTLS, lands DKIM- and DMARC-valid and as written', async () => {
    const corpus = fidelityCorpus().filter((message) => !message.usesTemplate && !message.usesEngagement);
    const transport = client();
    const messageIds: string[] = [];
    for (const message of corpus) {
      const info = await transport.sendMail({
        from: `Acme <hello@${DOMAIN}>`,
        to: RECIPIENT,
        bcc: 'hidden@receiver.test',
        ...asNodemailer(message),
      });
      assert.match(info.response, /^250 2\.0\.0 Ok: queued as msg_/, message.name);
      messageIds.push(info.messageId);
    }
    transport.close();
    const delivered = await postfix.waitForMailbox(RECIPIENT, corpus.length, 60_000);
    const resolver = new Resolver();
    resolver.setServers([dns.address]);
    const resolve = (name: string, type: string) => resolver.resolve(name, type as 'TXT');
    const arrived: Buffer[] = [];
    for (const [index, message] of corpus.entries()) {
      const copy = delivered.find((bytes) =>
        bytes.toString('latin1').includes(`Message-ID: ${messageIds[index]}`),
      );
      assert.ok(copy, `${message.name}: in the mailbox with the client's own Message-ID`);
      const crlf = Buffer.from(copy.toString('latin1').replace(/\n/g, '\r\n'), 'latin1');
      assertWireLines(crlf, message.name);
      const sender = /^Return-Path: <([^>]*)>/im.exec(copy.toString('latin1'))?.[1] ?? '';
      const verdict = await mailauthVerdict(crlf, { resolver: resolve, sender });
      assert.deepEqual(
        verdict.dkim.map((signature) => [signature.domain, signature.result]),
        [[DOMAIN, 'pass']],
        `${message.name}: mailauth DKIM ${JSON.stringify(verdict.dkim)}`,
      );
      assert.equal(verdict.dmarc, 'pass', `${message.name}: DMARC`);
      await assertContent(crlf, message, message.name);
      arrived.push(crlf);
    }
    if (!dkimpyAvailable()) throw new Error('dkimpy (python3-dkim) is needed: .ci/run installs it');
    const verdicts = await dkimpyVerify(arrived, dkimKeys);
    verdicts.forEach((verdict, index) =>
      assert.ok(verdict.pass, `${corpus[index]!.name}: dkimpy ${verdict.detail}`),
    );
    // The Bcc recipient got its copy; no copy carries a Bcc header (assertContent checks it).
    await postfix.waitForMailbox('hidden@receiver.test', corpus.length, 60_000);
    const listed = await emailsTo(RECIPIENT);
    assert.ok(listed.length >= corpus.length);
    assert.ok(listed.every((email) => email.source === 'smtp' && email.smtp_username === 'wordpress'));
    // /metrics counts them by source.
    const metrics = await fetch(`${server.url}/metrics`, {
      headers: { authorization: 'Bearer metrics-token-for-the-submission-test' },
    });
    const accepted = /^postwire_emails_accepted_total\{source="smtp"\} (\d+)$/m.exec(await metrics.text());
    assert.ok(Number(accepted?.[1]) >= corpus.length, 'SMTP sends counted');
  });

  test("a real Postfix with this server as its SASL smarthost relays a local user's mail through it", async () => {
    const receiver = await startReceiver();
    let office: TestPostfix | undefined;
    try {
      const webhook = await api('POST', '/v1/webhooks', {
        url: receiver.url,
        events: ['email.sent', 'email.delivered'],
      });
      assert.equal(webhook.status, 201, JSON.stringify(webhook.body));
      office = await startPostfix({
        domains: ['office.test'],
        smarthost: { host: '127.0.0.1', port, username: 'office-postfix', password: KEY },
      });
      // A user of the office's mail server sends as usual; the server relays through Postwire.
      const local = nodemailer.createTransport({ host: '127.0.0.1', port: office.port, ignoreTLS: true });
      await local.sendMail({
        from: `Grace <grace@${DOMAIN}>`,
        to: 'bob@receiver.test',
        subject: 'Minutes of the meeting',
        text: 'Attached are the minutes.\nThree decisions, two open points.\n',
        html: '<p>Attached are the <b>minutes</b>.</p>',
        attachments: [{ filename: 'minutes.txt', content: 'Decision 1\nDecision 2\nDecision 3\n' }],
      });
      local.close();
      const [copy] = await postfix.waitForMailbox('bob@receiver.test', 1, 30_000);
      const crlf = Buffer.from(copy!.toString('latin1').replace(/\n/g, '\r\n'), 'latin1');
      const text = crlf.toString('latin1');
      assert.match(text, /by mx\.receiver\.test \(Postfix\)/);
      const resolver = new Resolver();
      resolver.setServers([dns.address]);
      const verdict = await mailauthVerdict(crlf, {
        resolver: (name: string, type: string) => resolver.resolve(name, type as 'TXT'),
        sender: /^Return-Path: <([^>]*)>/im.exec(text)?.[1] ?? '',
      });
      assert.deepEqual(
        verdict.dkim.map((signature) => [signature.domain, signature.result]),
        [[DOMAIN, 'pass']],
      );
      const [email] = await emailsTo('bob@receiver.test');
      assert.deepEqual([email!.source, email!.smtp_username], ['smtp', 'office-postfix']);
      const sent = await until(
        () =>
          receiver.requests
            .map((request) => JSON.parse(request.body))
            .find((event) => event.type === 'email.sent' && event.data.email_id === email!.id),
        20_000,
        'email.sent at the webhook',
      );
      assert.equal(sent.data.recipient, 'bob@receiver.test');
      // The receiving Postfix's success notice, to the return path Postwire gave the copy, read and applied.
      const delivered = await until(
        () =>
          receiver.requests
            .map((request) => JSON.parse(request.body))
            .find((event) => event.type === 'email.delivered' && event.data.email_id === email!.id),
        30_000,
        'email.delivered at the webhook',
      );
      assert.equal(delivered.data.recipient, 'bob@receiver.test');
      assert.match(office.log(), /relay=127\.0\.0\.1\[127\.0\.0\.1\]:\d+.*status=sent/);
    } catch (error) {
      // What the office's Postfix said about the relay, with the failure.
      throw new Error(`${(error as Error).message}\noffice Postfix log:\n${office?.log().slice(-3000)}`, {
        cause: error,
      });
    } finally {
      await office?.close();
      await receiver.close();
    }
  });

  test('implicit TLS on the second port; options as headers become tags and a schedule, and leave no trace', async () => {
    const transport = client({ tls: 'implicit' });
    const sendAt = new Date(Date.now() + 3_600_000).toISOString();
    const info = await transport.sendMail({
      from: `hello@${DOMAIN}`,
      to: 'later@receiver.test',
      subject: 'Scheduled over SMTP',
      text: 'Line one\nLine two\n',
      headers: { 'X-Postwire-Tags': 'plan=pro, source=cron', 'X-Postwire-Send-At': sendAt },
    });
    transport.close();
    const id = /queued as (msg_[0-9a-z]+)/.exec(info.response)![1]!;
    const email = (await api('GET', `/v1/emails/${id}`)).body;
    assert.deepEqual(email.tags, { plan: 'pro', source: 'cron' });
    assert.equal(email.status, 'scheduled');
    assert.equal(email.scheduled_at, sendAt);
    assert.equal(email.source, 'smtp');
  });

  test('X-Postwire-Unsubscribe: each recipient gets its own signed one-click List-Unsubscribe', async () => {
    const transport = client();
    await transport.sendMail({
      from: `News <news@${DOMAIN}>`,
      to: 'reader@receiver.test',
      subject: 'This week',
      text: 'Three things happened.\nHere they are.\n',
      headers: { 'X-Postwire-Unsubscribe': 'true' },
    });
    transport.close();
    const [copy] = await postfix.waitForMailbox('reader@receiver.test', 1, 30_000);
    const crlf = Buffer.from(copy!.toString('latin1').replace(/\n/g, '\r\n'), 'latin1');
    const text = crlf.toString('latin1');
    assert.match(text, /^List-Unsubscribe: <https:\/\/mail\.acme\.example\/[^>]+>/m);
    assert.match(text, /^List-Unsubscribe-Post: List-Unsubscribe=One-Click\r$/m);
    assert.doesNotMatch(text, /^X-Postwire-/im);
    const resolver = new Resolver();
    resolver.setServers([dns.address]);
    const verdict = await mailauthVerdict(crlf, {
      resolver: (name: string, type: string) => resolver.resolve(name, type as 'TXT'),
      sender: /^Return-Path: <([^>]*)>/im.exec(text)?.[1] ?? '',
    });
    assert.deepEqual(
      verdict.dkim.map((signature) => [signature.domain, signature.result]),
      [[DOMAIN, 'pass']],
    );
    assert.match(/^DKIM-Signature:[\s\S]*?(?=^\S)/m.exec(text)![0], /list-unsubscribe/i, 'signed');
  });

  test('X-Postwire-Track: links and a pixel in the html part only, the rest as submitted, DKIM-valid, clicks recorded', async () => {
    const html =
      '<html><body><p>Your <a href="https://shop.acme.example/order?id=7&amp;utm=mail">order</a> has shipped.</p></body></html>';
    // The bytes the application submits, built first to compare the parts that must arrive as written.
    const built = await new MailComposer({
      from: `Shop <shop@${DOMAIN}>`,
      to: 'tracked@receiver.test',
      subject: 'Shipped',
      text: 'Your order has shipped: https://shop.acme.example/order?id=7\n',
      html,
      attachments: [
        { filename: 'invoice.pdf', content: Buffer.from('%PDF-1.4 not really\n\u0000\u00ff', 'latin1') },
      ],
      headers: { 'X-Postwire-Track': 'opens, clicks' },
    })
      .compile()
      .build();
    // As SMTP carries it: every line ending CRLF.
    const submitted = Buffer.from(built.toString('latin1').replace(/\r?\n/g, '\r\n'), 'latin1');
    const transport = client();
    const info = await transport.sendMail({
      envelope: { from: `shop@${DOMAIN}`, to: ['tracked@receiver.test'] },
      raw: submitted,
    });
    transport.close();
    const id = /queued as (msg_[0-9a-z]+)/.exec(info.response)![1]!;
    const [copy] = await postfix.waitForMailbox('tracked@receiver.test', 1, 30_000);
    const crlf = Buffer.from(copy!.toString('latin1').replace(/\n/g, '\r\n'), 'latin1');
    const text = crlf.toString('latin1');
    assert.doesNotMatch(text, /^X-Postwire-/im);

    // The text part and the attachment: byte for byte as submitted (header and encoded body).
    const section = (type: RegExp) => {
      const source = submitted.toString('latin1');
      const start = source.search(type);
      return source.slice(start, source.indexOf('\r\n--', start));
    };
    for (const type of [/^Content-Type: text\/plain/m, /^Content-Type: application\/pdf/m]) {
      const part = section(type);
      assert.ok(part.length > 40 && text.includes(part), `as submitted: ${part.slice(0, 60)}`);
    }
    // The html: its link points at the tracking URL, and the pixel is there.
    const parsed = await simpleParser(crlf);
    const tracked = /href="(https:\/\/mail\.acme\.example\/c\/[^"]+)"/.exec(parsed.html as string)?.[1];
    assert.ok(tracked, parsed.html as string);
    assert.match(parsed.html as string, /<img src="https:\/\/mail\.acme\.example\/o\/[^"]+" width="1"/);
    assert.equal(parsed.text, 'Your order has shipped: https://shop.acme.example/order?id=7\n');
    assert.equal(parsed.attachments[0]!.content.toString('latin1'), '%PDF-1.4 not really\n\u0000\u00ff');

    // Signed after the rewrite: both verifiers pass.
    const resolver = new Resolver();
    resolver.setServers([dns.address]);
    const verdict = await mailauthVerdict(crlf, {
      resolver: (name: string, type: string) => resolver.resolve(name, type as 'TXT'),
      sender: /^Return-Path: <([^>]*)>/im.exec(text)?.[1] ?? '',
    });
    assert.deepEqual(
      verdict.dkim.map((signature) => [signature.domain, signature.result]),
      [[DOMAIN, 'pass']],
    );
    if (!dkimpyAvailable()) throw new Error('dkimpy (python3-dkim) is needed: .ci/run installs it');
    const [dkimpy] = await dkimpyVerify([crlf], dkimKeys);
    assert.ok(dkimpy!.pass, `dkimpy ${dkimpy!.detail}`);

    // A mail client follows the link: 302 to the original URL, and the click is recorded.
    const parsedUrl = new URL(tracked);
    const click = await fetch(`${server.url}${parsedUrl.pathname}${parsedUrl.search}`, {
      redirect: 'manual',
      headers: { 'user-agent': BROWSER },
    });
    assert.equal(click.status, 302);
    assert.equal(click.headers.get('location'), 'https://shop.acme.example/order?id=7&utm=mail');
    const clicks = await until(
      async () => {
        const email = (await api('GET', `/v1/emails/${id}`)).body;
        return email.recipients[0].clicks?.length > 0 && email.recipients[0].clicks;
      },
      10_000,
      'the click in the email',
    );
    assert.equal(clicks[0].url, 'https://shop.acme.example/order?id=7&utm=mail');
  });

  test('a client retrying with the same Message-ID within 24 h gets 250 and no second email', async () => {
    const transport = client();
    const message = {
      from: `hello@${DOMAIN}`,
      to: 'once@receiver.test',
      subject: 'Only once',
      text: 'Retried\nafter a lost 250\n',
      messageId: '<retry-1@app.example>',
    };
    const first = await transport.sendMail(message);
    const second = await transport.sendMail(message);
    transport.close();
    const id = /queued as (msg_[0-9a-z]+)/.exec(first.response)![1]!;
    assert.equal(second.response, `250 2.0.0 Already accepted as ${id}`);
    assert.equal((await emailsTo('once@receiver.test')).length, 1);
  });

  test('refused: no AUTH, a wrong key, AUTH in the clear, a From domain not allowed, bad options, oversize', async () => {
    const refusal = async (transport: ReturnType<typeof client>, mail: Record<string, unknown>) => {
      try {
        await transport.sendMail({
          from: `hello@${DOMAIN}`,
          to: 'x@receiver.test',
          subject: 's',
          text: 'a\nb\n',
          ...mail,
        });
        assert.fail('accepted');
      } catch (error) {
        const { response, message } = error as { response?: string; message?: string };
        return response || message || String(error);
      } finally {
        transport.close();
      }
    };
    assert.match(await refusal(client({ pass: '' }), {}), /^530 5\.7\.0/);
    assert.match(await refusal(client({ pass: 'pw_wrong_key_0000000000000000' }), {}), /^535 5\.7\.8/);
    assert.match(await refusal(client({ tls: 'none' }), {}), /^538 5\.7\.11/);
    assert.match(await refusal(client(), { from: 'someone@other.example' }), /^550 5\.7\.1/);
    assert.match(
      await refusal(client(), { headers: { 'X-Postwire-Tags': 'a=b\r\nBcc: victim@example.org' } }),
      /^550 5\.6\.0/,
    );
    assert.match(
      await refusal(client(), { headers: { 'X-Postwire-Track': 'opens, everything' } }),
      /^550 5\.6\.0 X-Postwire-Track takes opens, clicks or both/,
    );
    assert.match(await refusal(client(), { text: 'x'.repeat(3 * 1024 * 1024) }), /^552/);
    assert.equal((await emailsTo('x@receiver.test')).length, 0, 'nothing stored');
  });

  test('swaks: pipelining, an 8-bit body, an SMTPUTF8 address, too many recipients, bad AUTH', async (t) => {
    if (!existsSync('/usr/bin/swaks')) {
      t.skip('swaks is not installed');
      return;
    }
    const swaks = (...args: string[]) =>
      new Promise<{ code: number; output: string }>((resolve) => {
        execFile(
          '/usr/bin/swaks',
          ['--server', `127.0.0.1:${port}`, '--tls', '--helo', 'swaks.test', ...args],
          { timeout: 30_000 },
          (error, stdout, stderr) =>
            resolve({ code: (error as { code?: number } | null)?.code ?? 0, output: stdout + stderr }),
        );
      });
    const auth = ['--auth', 'PLAIN', '--auth-user', 'swaks', '--auth-password', KEY];
    const from = ['--from', `swaks@${DOMAIN}`];

    const piped = await swaks(
      ...auth,
      ...from,
      '--pipeline',
      '--to',
      'piped@receiver.test',
      '--header',
      'Subject: Pipelined',
      '--body',
      'one\ntwo\nthree\n',
    );
    assert.equal(piped.code, 0, piped.output);
    assert.match(piped.output, /<~ {0,2}250-PIPELINING/);
    assert.match(piped.output, /250 2\.0\.0 Ok: queued as msg_/);

    const eightBit = await swaks(
      ...auth,
      ...from,
      '--to',
      'eight@receiver.test',
      '--header',
      'Subject: =?UTF-8?Q?Gr=C3=BC=C3=9Fe?=',
      '--add-header',
      'Content-Type: text/plain; charset=utf-8',
      '--add-header',
      'Content-Transfer-Encoding: 8bit',
      '--body',
      'Grüße aus Köln\nÑandú\n',
    );
    assert.equal(eightBit.code, 0, eightBit.output);
    const [copy] = await postfix.waitForMailbox('eight@receiver.test', 1, 30_000);
    assert.match(copy!.toString('utf8'), /Grüße aus Köln\nÑandú/);

    const unicode = await swaks(...auth, ...from, '--to', 'jörg@receiver.test');
    assert.match(unicode.output, /553 5\.1\.3/, unicode.output);

    const many = Array.from({ length: 151 }, (_, i) => `r${i}@receiver.test`).join(',');
    const tooMany = await swaks(...auth, ...from, '--to', many, '--quit-after', 'RCPT');
    assert.match(tooMany.output, /452 4\.5\.3 At most 150 recipients/, tooMany.output.slice(-500));

    const badAuth = await swaks(
      '--auth',
      'LOGIN',
      '--auth-user',
      'x',
      '--auth-password',
      'pw_not_a_key',
      ...from,
      '--to',
      'nobody@receiver.test',
    );
    assert.match(badAuth.output, /535 5\.7\.8/);
    assert.equal((await emailsTo('nobody@receiver.test')).length, 0);
  });

  test('a client that drops mid-DATA leaves nothing stored', async () => {
    const socket = tls.connect({ host: '127.0.0.1', port: tlsPort, rejectUnauthorized: false });
    const { reply, say } = rawSmtp(socket);
    await reply('220');
    await say('EHLO dropper.test', '250');
    await say(`AUTH PLAIN ${Buffer.from(`\0dropper\0${KEY}`).toString('base64')}`, '235');
    await say(`MAIL FROM:<dropper@${DOMAIN}>`, '250');
    await say('RCPT TO:<dropped@receiver.test>', '250');
    await say('DATA', '354');
    socket.write(
      `From: dropper@${DOMAIN}\r\nTo: dropped@receiver.test\r\nSubject: cut\r\n\r\nthe first half of`,
    );
    socket.destroy();
    // The server saw the connection end mid-DATA: a message begun afterwards on a new connection is stored, the
    // dropped one never is.
    const transport = client();
    await transport.sendMail({
      from: `dropper@${DOMAIN}`,
      to: 'after-drop@receiver.test',
      subject: 'next',
      text: 'a\nb\n',
    });
    transport.close();
    assert.equal((await emailsTo('dropped@receiver.test')).length, 0);
    assert.equal((await emailsTo('after-drop@receiver.test')).length, 1);
  });

  test('scoped keys: a read_only key is refused at AUTH; a key limited to a domain sends from it and no other', async () => {
    const refusal = async (pass: string, from: string) => {
      const transport = client({ pass });
      try {
        await transport.sendMail({ from, to: 'scoped@receiver.test', subject: 's', text: 'a\nb\n' });
        return 'accepted';
      } catch (error) {
        return String((error as { response?: string }).response ?? error);
      } finally {
        transport.close();
      }
    };
    const reader = await api('POST', '/v1/api-keys', { name: 'reports', permission: 'read_only' });
    assert.equal(
      await refusal(reader.body.token, `hello@${DOMAIN}`),
      '535 5.7.8 This API key is read_only: SMTP submission needs a sending_access or full_access key',
    );
    const domain = (await api('GET', '/v1/domains')).body.data.find(
      (item: { name: string }) => item.name === DOMAIN,
    );
    const limited = await api('POST', '/v1/api-keys', {
      name: 'shop',
      permission: 'sending_access',
      domain_id: domain.id,
    });
    assert.equal(limited.status, 201);
    assert.equal(await refusal(limited.body.token, `shop@${DOMAIN}`), 'accepted');
    assert.equal(
      await refusal(limited.body.token, 'shop@elsewhere.example'),
      `550 5.7.1 This key may send only from the domain '${DOMAIN}'; 'elsewhere.example' is not it. (from)`,
    );
    assert.equal((await emailsTo('scoped@receiver.test')).length, 1, 'only the allowed one is stored');
  });

  test('a key revoked while a session is open cannot send its next message', async () => {
    const keyOutput: string[] = [];
    const env = { ...database.env, POSTWIRE_ENCRYPTION_KEY: Buffer.alloc(32, 12).toString('hex') };
    const io = {
      stdout: { write: (text: string) => keyOutput.push(text) },
      stderr: { write: () => true },
      env,
    };
    const project = await database.database.handle.db
      .selectFrom('projects')
      .select('id')
      .executeTakeFirstOrThrow();
    assert.equal(await runCli(['keys', 'create', '--project', project.id], io), 0);
    const key = keyOutput.join('').trim().split('\n').at(-1)!;
    const transport = nodemailer.createTransport({
      pool: true,
      maxConnections: 1,
      host: '127.0.0.1',
      port,
      requireTLS: true,
      tls: { rejectUnauthorized: false },
      auth: { user: 'cron', pass: key },
    });
    try {
      const mail = { from: `hello@${DOMAIN}`, to: 'revoked@receiver.test', subject: 'r', text: 'a\nb\n' };
      await transport.sendMail(mail);
      const row = await database.database.handle.db
        .selectFrom('api_keys')
        .select('id')
        .where('key_hash', '=', sha256Hex(key))
        .executeTakeFirstOrThrow();
      assert.equal(await runCli(['keys', 'revoke', row.id], { ...io, stdout: { write: () => true } }), 0);
      await until(
        async () => {
          try {
            await transport.sendMail(mail);
            return false;
          } catch (error) {
            return /^535 5\.7\.8/.test(String((error as { response?: string }).response));
          }
        },
        10_000,
        'the revoked key to be refused',
      );
      assert.equal((await emailsTo('revoked@receiver.test')).length, 1);
    } finally {
      transport.close();
    }
  });
});

test('postwire submission runs alone; killed right after its 250, the message is still sent, once', async () => {
  const database = await createProcessDatabase('sqlite');
  const children: ServerProcess[] = [];
  try {
    const env = {
      ...database.env,
      POSTWIRE_BOOTSTRAP_KEY: KEY,
      POSTWIRE_ENCRYPTION_KEY: Buffer.alloc(32, 13).toString('hex'),
      LOG_LEVEL: 'info',
    };
    // The first start makes the project and its key.
    const first = await startServerProcess({ ...env, INBOUND_SMTP_PORT: '0' });
    children.push(first);
    assert.equal(await first.stop(), 0);

    const alone = await startServerProcess(
      { ...env, SUBMISSION_PORT: '0', SUBMISSION_ALLOW_PLAIN_LOOPBACK: 'true' },
      ['src/cli.ts', 'submission'],
      (line) => /Postwire submission started/.test(line.msg),
    );
    children.push(alone);
    const transport = nodemailer.createTransport({
      host: '127.0.0.1',
      port: await submissionSmtpPort(alone),
      ignoreTLS: true,
      auth: { user: 'gitea', pass: KEY },
    });
    const info = await transport.sendMail({
      from: 'gitea@example.com',
      to: 'dev@example.org',
      subject: 'A new issue',
      text: 'Issue #7 was opened.\nSee the tracker.\n',
    });
    transport.close();
    const id = /queued as (msg_[0-9a-z]+)/.exec(info.response)![1]!;
    // No worker ran in that process: the 250 meant stored, and nothing more. Killed at once.
    alone.kill();
    await alone.exited;

    const serve = await startServerProcess({ ...env, INBOUND_SMTP_PORT: '0' });
    children.push(serve);
    const email = await until(
      async () => {
        const body = (await requestJson(`${serve.url}/v1/emails/${id}`, KEY, 'GET')).body;
        return ['sent', 'delivered'].includes(body.recipients?.[0]?.status) && body;
      },
      15_000,
      'the serve process to send the submitted email',
    );
    assert.deepEqual([email.source, email.smtp_username], ['smtp', 'gitea']);
    assert.equal(email.recipients[0].attempts, 1, 'sent once');
    const raw = (await requestJson(`${serve.url}/v1/emails/${id}/raw`, KEY, 'GET')).body.raw as string;
    assert.match(raw, /^Subject: A new issue\r$/m);
    assert.match(raw, /Issue #7 was opened\.\r\nSee the tracker\.\r\n/);
    assert.equal(await serve.stop(), 0);
  } finally {
    for (const child of children) child.kill();
    await database.cleanup();
  }
});

describe('SMTP submission: the daily limit, suppression, RSET, AUTH lockout (an injected clock)', () => {
  const LIMIT = 3;
  const AUTH_FAILURES = 3;
  const DAY_MS = 24 * 3_600_000;
  let database: ProcessDatabase;
  let sink: TestSmtpServer;
  let receiver: Receiver;
  let server: RunningServer;
  let port: number;
  /** The injected clock: real time moved by `shift`. */
  let shift = 0;
  const clock = { now: () => new Date(Date.now() + shift) };

  const api = (method: string, pathname: string, body?: unknown) =>
    requestJson(`${server.url}${pathname}`, KEY, method, body);
  const client = (pass = KEY) =>
    nodemailer.createTransport({
      host: '127.0.0.1',
      port,
      ignoreTLS: true,
      auth: { user: 'app', pass },
    });
  const emailsTo = async (to: string) =>
    (await api('GET', `/v1/emails?recipient=${encodeURIComponent(to)}`)).body.data as Array<
      Record<string, any>
    >;
  const session = async (key = KEY) => {
    const smtp = rawSmtp(net.connect(port, '127.0.0.1'));
    await smtp.reply('220');
    await smtp.say('EHLO raw.test', '250');
    await smtp.say(`AUTH PLAIN ${Buffer.from(`\0raw\0${key}`).toString('base64')}`, '235');
    return smtp;
  };

  before(async () => {
    database = await createProcessDatabase('sqlite');
    sink = await startSmtpServer();
    receiver = await startReceiver();
    server = await startServer(
      loadConfig({
        ...database.env,
        PORT: '0',
        POSTWIRE_BOOTSTRAP_KEY: KEY,
        POSTWIRE_ENCRYPTION_KEY: Buffer.alloc(32, 14).toString('hex'),
        SMTP_URL: `smtp://127.0.0.1:${sink.port}`,
        SUBMISSION_PORT: '0',
        SUBMISSION_ALLOW_PLAIN_LOOPBACK: 'true',
        SEND_DAILY_LIMIT: String(LIMIT),
        POSTWIRE_AUTH_FAILURE_LIMIT: String(AUTH_FAILURES),
        POSTWIRE_AUTH_FAILURE_WINDOW: '10m',
        POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
        LOG_LEVEL: 'silent',
      }),
      { worker: true, clock, stdout: { write() {} } },
    );
    port = server.submission!.port!;
    const webhook = await api('POST', '/v1/webhooks', { url: receiver.url, events: ['email.suppressed'] });
    assert.equal(webhook.status, 201, JSON.stringify(webhook.body));
  });

  after(async () => {
    await server?.close();
    await sink?.close();
    await receiver?.close();
    await database?.cleanup();
  });

  test('SEND_DAILY_LIMIT: the recipients over it get 452 4.5.3 at RCPT, the others the mail', async () => {
    shift += DAY_MS; // a day of its own
    const to = Array.from({ length: LIMIT + 2 }, (_, i) => `limited${i}@receiver.test`);
    const transport = client();
    const info = await transport.sendMail({
      from: 'app@example.com',
      to,
      subject: 'Limited',
      text: 'a\nb\n',
    });
    transport.close();
    assert.deepEqual(info.accepted, to.slice(0, LIMIT));
    assert.deepEqual(info.rejected, to.slice(LIMIT));
    for (const error of (info as unknown as { rejectedErrors: Array<{ response: string }> }).rejectedErrors) {
      assert.match(error.response, /^452 4\.5\.3 The daily sending limit is reached for this recipient/);
    }
    const id = /queued as (msg_[0-9a-z]+)/.exec(info.response)![1]!;
    const email = (await api('GET', `/v1/emails/${id}`)).body;
    assert.deepEqual(
      email.recipients.map((recipient: { address: string }) => recipient.address),
      to.slice(0, LIMIT),
    );
    // The receiving server got it for the recipients that fit (in one transaction or one per return path).
    const delivered = await until(
      () => {
        const got = sink.messages
          .filter((message) => message.messageId === info.messageId)
          .flatMap((message) => message.to);
        return got.length >= LIMIT && got;
      },
      10_000,
      'the accepted recipients at the receiving server',
    );
    assert.deepEqual([...delivered].sort(), to.slice(0, LIMIT).sort());
    for (const address of to.slice(LIMIT)) assert.equal((await emailsTo(address)).length, 0);
  });

  test('two sessions both told yes at RCPT: the store still holds the limit, the second gets 452 at DATA', async () => {
    shift += DAY_MS;
    const transport = client();
    await transport.sendMail({
      from: 'app@example.com',
      to: ['early1@receiver.test', 'early2@receiver.test'],
      subject: 'Two of three',
      text: 'a\n',
    });
    transport.close();
    // One recipient left today; each session is told it fits.
    const first = await session();
    const second = await session();
    for (const [smtp, name] of [
      [first, 'race1'],
      [second, 'race2'],
    ] as const) {
      await smtp.say('MAIL FROM:<app@example.com>', '250');
      await smtp.say(`RCPT TO:<${name}@receiver.test>`, '250');
    }
    const data = (name: string) =>
      `From: app@example.com\r\nTo: ${name}@receiver.test\r\nSubject: race\r\n\r\nbody\r\n.`;
    await first.say('DATA', '354');
    assert.match(await first.say(data('race1'), '250'), /queued as msg_/);
    await second.say('DATA', '354');
    assert.match(
      await second.say(data('race2'), '452'),
      /^452 4\.5\.3 This project may send to 3 recipients/,
    );
    assert.equal((await emailsTo('race1@receiver.test')).length, 1);
    assert.equal((await emailsTo('race2@receiver.test')).length, 0);
  });

  test('RSET: only the second transaction of a session is sent', async () => {
    shift += DAY_MS;
    const smtp = await session();
    await smtp.say('MAIL FROM:<app@example.com>', '250');
    await smtp.say('RCPT TO:<first-try@receiver.test>', '250');
    await smtp.say('RSET', '250');
    await smtp.say('MAIL FROM:<app@example.com>', '250');
    await smtp.say('RCPT TO:<second-try@receiver.test>', '250');
    await smtp.say('DATA', '354');
    const reply = await smtp.say(
      'From: app@example.com\r\nTo: second-try@receiver.test\r\nSubject: after RSET\r\nMessage-ID: <rset@app.example>\r\n\r\nbody\r\n.',
      '250',
    );
    await smtp.say('QUIT', '221');
    const id = /queued as (msg_[0-9a-z]+)/.exec(reply)![1]!;
    const email = (await api('GET', `/v1/emails/${id}`)).body;
    assert.deepEqual(
      email.recipients.map((recipient: { address: string }) => recipient.address),
      ['second-try@receiver.test'],
    );
    const arrived = await until(
      () => sink.messages.find((message) => message.messageId === '<rset@app.example>'),
      10_000,
      'the message after RSET at the receiving server',
    );
    assert.deepEqual(arrived.to, ['second-try@receiver.test']);
    assert.equal((await emailsTo('first-try@receiver.test')).length, 0);
  });

  test('a suppressed recipient is accepted, recorded suppressed, and email.suppressed reaches the webhook', async () => {
    shift += DAY_MS;
    const added = await api('POST', '/v1/suppressions', { addresses: ['gone@receiver.test'] });
    assert.equal(added.status, 201, JSON.stringify(added.body));
    const transport = client();
    const info = await transport.sendMail({
      from: 'app@example.com',
      to: ['gone@receiver.test', 'here@receiver.test'],
      subject: 'One of two',
      text: 'a\n',
    });
    transport.close();
    assert.deepEqual(info.accepted, ['gone@receiver.test', 'here@receiver.test']);
    const id = /queued as (msg_[0-9a-z]+)/.exec(info.response)![1]!;
    const event = await until(
      () =>
        receiver.requests
          .map((request) => JSON.parse(request.body))
          .find((body) => body.type === 'email.suppressed' && body.data.email_id === id),
      10_000,
      'email.suppressed at the webhook',
    );
    assert.equal(event.data.recipient, 'gone@receiver.test');
    const email = (await api('GET', `/v1/emails/${id}`)).body;
    const statuses = new Map(
      email.recipients.map((recipient: { address: string; status: string }) => [
        recipient.address,
        recipient.status,
      ]),
    );
    assert.equal(statuses.get('gone@receiver.test'), 'suppressed');
    await until(
      () => sink.messages.find((message) => message.to.includes('here@receiver.test')),
      10_000,
      'the other recipient to get it',
    );
    assert.ok(!sink.messages.some((message) => message.to.includes('gone@receiver.test')));
  });

  test('one header rule with the API: a second From (or any single field), a foreign Sender or Resent-*, a repeated option', async () => {
    shift += DAY_MS;
    const domain = await api('POST', '/v1/domains', { name: 'shop.example' });
    assert.equal(domain.status, 201, JSON.stringify(domain.body));
    const limited = await api('POST', '/v1/api-keys', {
      name: 'shop',
      permission: 'sending_access',
      domain_id: domain.body.id,
    });
    assert.equal(limited.status, 201, JSON.stringify(limited.body));
    const smtp = await session(limited.body.token);
    const submit = async (header: string, code: string) => {
      await smtp.say('MAIL FROM:<shop@shop.example>', '250');
      await smtp.say('RCPT TO:<rules@receiver.test>', '250');
      await smtp.say('DATA', '354');
      return smtp.say(`${header}\r\nThe body.\r\n.`, code);
    };
    const base: Record<string, string> = {
      From: 'shop@shop.example',
      To: 'rules@receiver.test',
      Subject: 'Header rules',
    };
    const headerOf = (fields: Array<[string, string]>) =>
      fields.map(([name, value]) => `${name}: ${value}\r\n`).join('');
    const second: Record<string, string> = {
      From: 'y@evil.example',
      Sender: 'list@shop.example',
      To: 'other@receiver.test',
      Cc: 'other@receiver.test',
      Bcc: 'other@receiver.test',
      'Reply-To': 'other@receiver.test',
      Subject: 'Another subject',
      Date: 'Mon, 30 Nov 2026 09:00:00 +0000',
      'Message-ID': '<twice@shop.example>',
      'In-Reply-To': '<earlier@shop.example>',
      References: '<earlier@shop.example>',
    };
    for (const [name, value] of Object.entries(second)) {
      const fields = Object.entries(base);
      // The field twice: once more where the base has it (in upper case: names are case-insensitive), else twice.
      const twice: Array<[string, string]> =
        name in base
          ? [[name.toUpperCase(), value]]
          : [
              [name, value],
              [name, value],
            ];
      assert.equal(
        await submit(headerOf([...fields, ...twice]), '550'),
        `550 5.6.0 The message has 2 ${name} fields; RFC 5322 allows one`,
      );
    }
    const fields = Object.entries(base);
    const refusedBy = (field: string) =>
      `550 5.7.1 This key may send only from the domain 'shop.example'; 'evil.example' is not it. (${field})`;
    assert.equal(
      await submit(headerOf([...fields, ['Sender', 'y@evil.example']]), '550'),
      refusedBy('Sender'),
    );
    assert.equal(
      await submit(headerOf([...fields, ['Resent-From', 'desk@shop.example, y@evil.example']]), '550'),
      refusedBy('Resent-From'),
    );
    assert.equal(
      await submit(headerOf([...fields, ['Resent-Sender', '"Evil" <y@evil.example>']]), '550'),
      refusedBy('Resent-Sender'),
    );
    assert.equal(
      await submit(headerOf([...fields, ['Sender', 'a@shop.example, b@shop.example']]), '550'),
      '550 5.6.0 The Sender header must hold exactly one address',
    );
    assert.equal(
      await submit(
        headerOf([...fields, ['X-Postwire-Tags', 'plan=pro'], ['X-Postwire-Tags', 'plan=free']]),
        '550',
      ),
      '550 5.6.0 X-Postwire-Tags is given 2 times; give each option once',
    );
    assert.equal(
      await submit(headerOf([...fields, ['X-Postwire-Track', 'opens'], ['x-postwire-track', 'none']]), '550'),
      '550 5.6.0 X-Postwire-Track is given 2 times; give each option once',
    );
    assert.equal((await emailsTo('rules@receiver.test')).length, 0, 'nothing refused is stored');

    // A mailing list's Sender and a forward's Resent-From in the key's domain (or a subdomain) pass, and travel as
    // written.
    const accepted = await submit(
      headerOf([
        ...fields,
        ['Sender', '"Shop list" <list@shop.example>'],
        ['Resent-From', 'desk@mail.shop.example'],
        ['Message-ID', '<rules-ok@shop.example>'],
      ]),
      '250',
    );
    await smtp.say('QUIT', '221');
    assert.match(accepted, /^250 2\.0\.0 Ok: queued as msg_/);
    const arrived = await until(
      () => sink.messages.find((message) => message.messageId === '<rules-ok@shop.example>'),
      10_000,
      'the message with a Sender at the receiving server',
    );
    const text = arrived.bytes.toString('latin1');
    assert.match(text, /^Sender: "Shop list" <list@shop\.example>\r$/m);
    assert.match(text, /^Resent-From: desk@mail\.shop\.example\r$/m);
    const parsed = await simpleParser(arrived.bytes);
    assert.deepEqual((parsed.headers.get('sender') as { value: unknown[] }).value, [
      { address: 'list@shop.example', name: 'Shop list' },
    ]);
    assert.deepEqual(
      parsed.from?.value.map((entry) => entry.address),
      ['shop@shop.example'],
    );
    assert.deepEqual(arrived.to, ['rules@receiver.test']);
  });

  test('a key revoked during DATA: the end of DATA is 535 5.7.8 and nothing is stored', async () => {
    shift += DAY_MS;
    const created = await api('POST', '/v1/api-keys', {
      name: 'revoked-mid-data',
      permission: 'sending_access',
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const smtp = await session(created.body.token);
    await smtp.say('MAIL FROM:<app@example.com>', '250');
    await smtp.say('RCPT TO:<mid-data@receiver.test>', '250');
    await smtp.say('DATA', '354');
    smtp.write(
      'From: app@example.com\r\nTo: mid-data@receiver.test\r\nSubject: revoked\r\n\r\nThe first half,\r\n',
    );
    const revoked = await api('DELETE', `/v1/api-keys/${created.body.id}`);
    assert.equal(revoked.status, 200, JSON.stringify(revoked.body));
    assert.equal(await smtp.say('the second half.\r\n.', '535'), '535 5.7.8 The API key was revoked');
    assert.equal((await emailsTo('mid-data@receiver.test')).length, 0);
  });

  test('failed AUTH is limited per client address: past the limit even a good key waits out the window', async () => {
    const refusal = async (pass: string) => {
      const transport = client(pass);
      try {
        await transport.sendMail({
          from: 'app@example.com',
          to: 'lock@receiver.test',
          subject: 's',
          text: 'a',
        });
        return '250';
      } catch (error) {
        return String((error as { response?: string }).response);
      } finally {
        transport.close();
      }
    };
    for (let i = 0; i < AUTH_FAILURES; i += 1)
      assert.match(await refusal('pw_wrong_0000000000000'), /^535 5\.7\.8/);
    assert.match(await refusal(KEY), /^454 4\.7\.0 Too many failed authentications/);
    shift += 10 * 60_000; // the window passes
    assert.equal(await refusal(KEY), '250');
    assert.equal((await emailsTo('lock@receiver.test')).length, 1);
  });
});

test('a message the store cannot take is answered 451, never 250', async () => {
  const listener = await startSubmissionListener({
    host: '127.0.0.1',
    port: 0,
    tlsPort: undefined,
    tls: undefined,
    allowPlainLoopback: true,
    maxBytes: 1024 * 1024,
    authenticate: async (username) => ({ projectId: 'prj_1', keyId: 'key_1', domainId: null, username }),
    stillValid: async () => true,
    withinDailyLimit: async () => true,
    submit: async () => {
      throw new Error('database unavailable');
    },
    failedAuthLimiter: createRateLimiter({ limit: 0, windowMs: 1000 }),
    logger: silentWorkerLogger,
  });
  try {
    const transport = nodemailer.createTransport({
      host: '127.0.0.1',
      port: listener.port,
      ignoreTLS: true,
      auth: { user: 'app', pass: KEY },
    });
    await assert.rejects(
      transport.sendMail({ from: 'app@example.com', to: 'x@example.org', subject: 's', text: 'a' }),
      (error: { response?: string }) => {
        assert.match(String(error.response), /^451 4\.3\.0 Could not store the message now; try again later/);
        return true;
      },
    );
    transport.close();
  } finally {
    await listener.close();
  }
});

/** A self-signed certificate for smtp.postwire.test, as `cert.pem` and `key.pem` in `dir`. */
function writeCertificate(dir: string): void {
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=smtp.postwire.test'].concat(
      ['-keyout', path.join(dir, 'key.pem'), '-out', path.join(dir, 'cert.pem')],
    ),
    { stdio: 'ignore' },
  );
}

/** A submission listener on a port and a TLS port, with a key that always passes, recording what it stores. */
async function boundedListener(
  t: { after(fn: () => Promise<void> | void): void },
  limits: { sessionTimeoutMs?: number; maxConnectionsPerClient?: number; memory?: SmtpBodyMemory },
) {
  const dir = mkdtempSync(path.join(tmpdir(), 'postwire-bounds-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeCertificate(dir);
  const stored: Buffer[] = [];
  const listener = await startSubmissionListener({
    host: '127.0.0.1',
    port: 0,
    tlsPort: 0,
    tls: {
      cert: readFileSync(path.join(dir, 'cert.pem'), 'utf8'),
      key: readFileSync(path.join(dir, 'key.pem'), 'utf8'),
    },
    allowPlainLoopback: true,
    maxBytes: 1024 * 1024,
    ...limits,
    authenticate: async (username) => ({ projectId: 'prj_1', keyId: 'key_1', domainId: null, username }),
    stillValid: async () => true,
    withinDailyLimit: async () => true,
    submit: async (_caller, _envelope, raw) => {
      stored.push(Buffer.concat(raw));
      return '2.0.0 Ok: queued as msg_1';
    },
    failedAuthLimiter: createRateLimiter({ limit: 1000, windowMs: 1000 }),
    logger: silentWorkerLogger,
  });
  t.after(() => listener.close());
  /** A connection, its replies, and when it closed. */
  const connect = (implicitTls = false) => {
    const socket = implicitTls
      ? tls.connect({ host: '127.0.0.1', port: listener.tlsPort!, rejectUnauthorized: false })
      : net.connect(listener.port!, '127.0.0.1');
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    return { socket, closed, ...rawSmtp(socket) };
  };
  return { listener, stored, connect };
}

test('one client address holds SUBMISSION_MAX_CONNECTIONS_PER_CLIENT sessions at most, both ports together', async (t) => {
  const { connect } = await boundedListener(t, { maxConnectionsPerClient: 2 });
  const first = connect();
  const second = connect(true);
  await first.reply('220');
  await second.reply('220');
  // Unauthenticated and idle, the two are all this address may hold: the third, on either port, is refused.
  for (const implicitTls of [false, true]) {
    const third = connect(implicitTls);
    assert.match(
      await third.reply(''),
      /^421 4\.7\.0 Too many connections from your address; try again later/,
    );
    await third.closed;
  }
  // Once one of the two leaves, the address may connect again (the count follows the closes).
  await first.say('QUIT', '221');
  await first.closed;
  const greeted = await until(
    async () => {
      const next = connect();
      const line = await next.reply('');
      next.socket.destroy();
      return line.startsWith('220 ') && line;
    },
    10_000,
    'a greeting once a session ended',
  );
  assert.match(greeted, /^220 /);
  second.socket.destroy();
});

test('a session still open at SUBMISSION_SESSION_TIMEOUT is ended with a 421, its message not stored', async (t) => {
  const { stored, connect } = await boundedListener(t, { sessionTimeoutMs: 3_000 });
  const client = connect();
  await client.reply('220');
  await client.say('EHLO slow.test', '250');
  await client.say(`AUTH PLAIN ${Buffer.from(`\0slow\0${KEY}`).toString('base64')}`, '235');
  await client.say('MAIL FROM:<slow@example.com>', '250');
  await client.say('RCPT TO:<slow@example.org>', '250');
  await client.say('DATA', '354');
  client.write('From: slow@example.com\r\nTo: slow@example.org\r\nSubject: slow\r\n\r\nA first line');
  // The client is never idle for 60 s; the 421 comes from the session's time limit, then the connection closes.
  assert.match(await client.reply('421'), /^421 .*Session time limit reached, closing/);
  await client.closed;
  assert.deepEqual(stored, [], 'a message cut off is not stored');
});

test('SMTP_BODY_MEMORY_LIMIT: a message that does not fit beside one being received gets 452 and is not stored; alone, it passes', async (t) => {
  const memory = createSmtpBodyMemory(64 * 1024);
  const { stored, connect } = await boundedListener(t, { memory });
  const inData = async (name: string) => {
    const client = connect();
    await client.reply('220');
    await client.say(`EHLO ${name}.test`, '250');
    await client.say(`AUTH PLAIN ${Buffer.from(`\0${name}\0${KEY}`).toString('base64')}`, '235');
    await client.say(`MAIL FROM:<${name}@example.com>`, '250');
    await client.say(`RCPT TO:<${name}@example.org>`, '250');
    await client.say('DATA', '354');
    return client;
  };
  // About 44 KiB each: one fits in 64 KiB, two do not.
  const message = (name: string) =>
    `From: ${name}@example.com\r\nTo: ${name}@example.org\r\nSubject: ${name}\r\n\r\n` +
    'A line of the monthly report, as many as it takes to make it large.\r\n'.repeat(650);
  const first = await inData('first');
  const second = await inData('second');
  first.write(message('first'));
  // The listener holds the first message's bytes (its end not yet sent) when the second arrives whole.
  await until(() => memory.held() >= 40_000, 10_000, 'the first message to be held');
  second.write(`${message('second')}.\r\n`);
  assert.match(await second.reply('452'), /^452 4\.3\.1 Too many large messages are being received at once/);
  first.write('.\r\n');
  assert.match(await first.reply('250'), /^250 /);
  await until(() => memory.held() === 0, 10_000, 'the bytes to be given back');
  // Tried again alone, the second message passes.
  await second.say('MAIL FROM:<second@example.com>', '250');
  await second.say('RCPT TO:<second@example.org>', '250');
  await second.say('DATA', '354');
  second.write(`${message('second')}.\r\n`);
  assert.match(await second.reply('250'), /^250 /);
  assert.deepEqual(
    stored.map((raw) => /^Subject: (\w+)/m.exec(raw.toString('latin1'))?.[1]),
    ['first', 'second'],
  );
  assert.equal(memory.held(), 0);
});
