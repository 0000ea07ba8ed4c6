import assert from 'node:assert/strict';
import { Resolver } from 'node:dns/promises';
import { after, before, describe, test } from 'node:test';
import { type Config, loadConfig } from '../src/config.ts';
import { createDns } from '../src/lib/dns.ts';
import { domainSettingsFromConfig } from '../src/modules/domains/domains.service.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { dkimpyAvailable, dkimpyVerify } from './helpers/dkimpy.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';
import { CORPUS_TEMPLATE, type CorpusMessage, fidelityCorpus } from './helpers/mail-corpus.ts';
import { postfixAvailable, startPostfix, type TestPostfix } from './helpers/postfix.ts';
import { assertContent, assertWireLines, mailauthVerdict } from './helpers/received-mail.ts';
import { ownLoopbackAddress, startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';
import { until } from './helpers/until.ts';
import { startConfiguredSendingWorker } from './helpers/sending.ts';
import { startFanOutWorker } from './helpers/fan-out.ts';
import { publishedTemplate, startRunWorker } from './helpers/automations.ts';
import { onServer } from './helpers/engagement.ts';
import { systemClock } from '../src/lib/clock.ts';
import type { QueueWorker } from '../src/queue/runtime.ts';

// Mail that verifies where it lands: the fidelity corpus (messages as senders write them) sent through every
// transport, and what arrives checked as a receiving server would: DKIM by mailauth and by dkimpy, DMARC for
// the aligned sending domain, the content read back by mailparser, CRLF-only lines of at most 998 octets, no
// Bcc header. One path goes through a real Postfix into a mailbox. A broadcast's copy, a broadcast's test send
// and an automation's send_email, made from a contact, are checked the same way.

const DOMAIN = 'acme.example';
const RECIPIENT = 'ada@receiver.test';
const PUBLIC_URL = 'https://mail.acme.example';

describe('the fidelity corpus lands DKIM- and DMARC-valid and intact on every transport', () => {
  let dns: TestDnsServer;
  let relay: TestSmtpServer;
  let mx: TestSmtpServer;
  let postfix: TestPostfix;
  let api: TestApp;
  let templateId: string;
  /** The DKIM TXT records of the verified domain, by name, for dkimpy. */
  const dkimKeys: Record<string, string> = {};
  const corpus = fidelityCorpus();

  const baseConfig = (extra: Record<string, string>): Config =>
    loadConfig({
      DNS_SERVERS: dns.address,
      BOUNCE_DOMAIN: 'bounces.postwire.test',
      INBOUND_MX_HOST: 'inbound.postwire.test',
      SENDING_SPF: 'v=spf1 ip4:127.0.0.1 -all',
      POSTWIRE_ALLOW_PRIVATE_URLS: 'true',
      PUBLIC_URL,
      SEND_TIMEOUT: '5s',
      ...extra,
    });

  before(async () => {
    dns = await startDnsServer();
    relay = await startSmtpServer();
    const mxAddress = ownLoopbackAddress();
    mx = await startSmtpServer({ host: mxAddress, port: 25 });
    dns.add('receiver.test', { type: 'MX', exchange: 'mx.receiver.test', priority: 10 });
    dns.add('mx.receiver.test', { type: 'A', address: mxAddress });
    // Required, as dkimpy is: .ci/run installs both, and a skipped path would hide what it exists to show.
    if (!postfixAvailable()) throw new Error('a real Postfix is needed (as root): .ci/run installs postfix');
    postfix = await startPostfix({ domains: ['receiver.test'] });

    const config = baseConfig({ MAIL_TRANSPORT: 'capture' });
    api = await startTestApp('sqlite', {
      allowPrivateUrls: true,
      dns: createDns({ servers: config.dnsServers }),
      domains: domainSettingsFromConfig(config),
      publicUrl: PUBLIC_URL,
    });
    const created = await api.request('POST', '/v1/domains', { body: { name: DOMAIN } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    for (const record of created.body.records) {
      if (record.type === 'MX') dns.add(record.name, { type: 'MX', exchange: record.value, priority: 10 });
      else dns.set(record.name, 'TXT', [{ type: 'TXT', text: record.value }]);
      if (record.purpose === 'dkim') dkimKeys[record.name] = record.value;
    }
    dns.set(`_dmarc.${DOMAIN}`, 'TXT', [{ type: 'TXT', text: 'v=DMARC1; p=reject; adkim=r; aspf=r' }]);
    const verified = await api.request('POST', `/v1/domains/${created.body.id}/verify`);
    assert.equal(verified.body.status, 'verified', JSON.stringify(verified.body.records));

    const template = await api.request('POST', '/v1/templates', { body: CORPUS_TEMPLATE });
    assert.equal(template.status, 201, JSON.stringify(template.body));
    templateId = template.body.id;
    const published = await api.request('POST', `/v1/templates/${templateId}/publish`, { body: {} });
    assert.equal(published.status, 200, JSON.stringify(published.body));
  });
  after(async () => {
    await api?.close();
    await postfix?.close();
    await mx?.close();
    await relay?.close();
    await dns?.close();
  });

  /** Sends the whole corpus with a sending worker of this configuration; the emails' ids, in corpus order. */
  async function sendCorpus(config: Config): Promise<string[]> {
    const worker = await startConfiguredSendingWorker(api, config, createDns({ servers: config.dnsServers }));
    try {
      const ids: string[] = [];
      for (const message of corpus) {
        const body = JSON.parse(JSON.stringify(message.body).replace('{{template}}', templateId));
        const sent = await api.request('POST', '/v1/emails', {
          body: { from: `Acme <hello@${DOMAIN}>`, to: [RECIPIENT], ...body },
        });
        assert.equal(sent.status, 202, `${message.name}: ${JSON.stringify(sent.body)}`);
        ids.push(sent.body.id);
      }
      // Every email's recipients have an outcome: the transport has handed each message on.
      for (const id of ids) await untilSettled(id);
      return ids;
    } finally {
      await worker.stop();
    }
  }

  async function untilSettled(id: string): Promise<void> {
    const recipients = await until(
      async () => {
        const email = await api.request('GET', `/v1/emails/${id}`);
        const all: any[] = email.body.recipients;
        return all.every((recipient) => recipient.status !== 'queued') && all;
      },
      10_000,
      `email ${id} to be sent`,
    );
    assert.ok(
      recipients.every((recipient) => ['sent', 'delivered'].includes(recipient.status)),
      JSON.stringify(recipients),
    );
  }

  async function messageIdOf(id: string): Promise<string> {
    const email = await api.request('GET', `/v1/emails/${id}`);
    return `<${email.body.message_id.replace(/^<|>$/g, '')}>`;
  }

  /**
   * An email that `make` has made (by a `worker` beside the app: a broadcast's fan-out, an automation's runs),
   * sent through the relay by a sending worker started beside it: its id once sent, and its copy as the relay
   * received it. Both workers are stopped after.
   */
  async function madeAndRelayed(worker: QueueWorker | undefined, to: string, make: () => Promise<string>) {
    const config = baseConfig({ MAIL_TRANSPORT: 'relay', SMTP_URL: `smtp://127.0.0.1:${relay.port}` });
    const sending = await startConfiguredSendingWorker(
      api,
      config,
      createDns({ servers: config.dnsServers }),
    );
    let id: string;
    try {
      id = await make();
      await untilSettled(id);
    } finally {
      await sending.stop();
      await worker?.stop();
    }
    const messageId = await messageIdOf(id);
    const copy = relay.messages.find((received) => received.messageId === messageId && received.to[0] === to);
    assert.ok(copy, `${id} arrived`);
    return { id, copy };
  }

  /** The recipient's copy of each email as an SMTP server received it, with its envelope sender. */
  async function copiesAt(server: TestSmtpServer, ids: string[]) {
    const arrived = [];
    for (const [index, id] of ids.entries()) {
      const messageId = await messageIdOf(id);
      const copy = server.messages.find(
        (received) => received.messageId === messageId && received.to[0] === RECIPIENT,
      );
      assert.ok(copy, `${corpus[index]!.name}: arrived`);
      arrived.push({ message: corpus[index]!, bytes: copy.bytes, sender: copy.from });
    }
    return arrived;
  }

  /** Checks every arrived copy of the corpus as a receiving server would; `sender` is its envelope sender. */
  async function checkArrived(arrived: Array<{ message: CorpusMessage; bytes: Buffer; sender: string }>) {
    const resolver = new Resolver();
    resolver.setServers([dns.address]);
    const resolve = (name: string, type: string) => resolver.resolve(name, type as 'TXT');
    for (const { message, bytes, sender } of arrived) {
      assertWireLines(bytes, message.name);
      const verdict = await mailauthVerdict(bytes, { resolver: resolve, sender });
      assert.deepEqual(
        verdict.dkim.map((signature) => [signature.domain, signature.result]),
        [[DOMAIN, 'pass']],
        `${message.name}: mailauth DKIM ${JSON.stringify(verdict.dkim)}`,
      );
      assert.equal(verdict.dmarc, 'pass', `${message.name}: DMARC`);
      await assertContent(bytes, message, message.name);
    }
    if (!dkimpyAvailable()) throw new Error('dkimpy (python3-dkim) is needed: .ci/run installs it');
    const verdicts = await dkimpyVerify(
      arrived.map(({ bytes }) => bytes),
      dkimKeys,
    );
    verdicts.forEach((verdict, index) =>
      assert.ok(verdict.pass, `${arrived[index]!.message.name}: dkimpy ${verdict.detail}`),
    );
  }

  test('relay: to an SMTP server', async () => {
    const ids = await sendCorpus(
      baseConfig({ MAIL_TRANSPORT: 'relay', SMTP_URL: `smtp://127.0.0.1:${relay.port}` }),
    );
    await checkArrived(await copiesAt(relay, ids));
  });

  test('direct: to the MX that DNS_SERVERS names', async () => {
    const ids = await sendCorpus(baseConfig({ MAIL_TRANSPORT: 'direct' }));
    await checkArrived(await copiesAt(mx, ids));
  });

  test('capture: GET /v1/emails/{id}/raw is the message as it would leave', async () => {
    const ids = await sendCorpus(baseConfig({ MAIL_TRANSPORT: 'capture' }));
    const arrived = [];
    for (const [index, id] of ids.entries()) {
      const raw = await api.request('GET', `/v1/emails/${id}/raw`);
      assert.equal(raw.status, 200, JSON.stringify(raw.body));
      arrived.push({
        message: corpus[index]!,
        bytes: Buffer.from(raw.body.raw, 'utf8'),
        sender: `hello@${DOMAIN}`,
      });
    }
    await checkArrived(arrived);
  });

  const created = async (path: string, body: unknown) => {
    const response = await api.request('POST', path, { body });
    assert.equal(response.status, 201, `${path}: ${JSON.stringify(response.body)}`);
    return response.body;
  };

  // A newsletter as one is written: Unicode in the subject, names and body, a paragraph longer than a line
  // may be, html and text, the contact's name and property (and a fallback) filled in.
  const NEWSLETTER_PARAGRAPH = `${'Ünïcödé wörds, 日本語の文, and emoji 🎉 in one paragraph with no break at all; '.repeat(30)}end.`;
  const NEWSLETTER = {
    from: `Acme Neuigkeiten <news@${DOMAIN}>`,
    subject: 'Grüße, {{ contact.first_name }} — 日本語 🎉',
    html: `<p>Hallo {{ contact.first_name }} {{ contact.last_name }} aus {{ contact.properties.stadt }} ({{ contact.properties.tier }}),</p>\n<p>${NEWSLETTER_PARAGRAPH}</p>\n<p><a href="{{ unsubscribe_url }}">Abmelden</a></p>\n`,
    text: `Hallo {{ contact.first_name }} aus {{ contact.properties.stadt }} ({{ contact.properties.tier }}),\n\n${NEWSLETTER_PARAGRAPH}\n\nAbmelden: {{ unsubscribe_url }}\n`,
  };
  /** What the newsletter says once personalized as its reader, with the unsubscribe URL a copy carries. */
  const newsletterRead = (name: string, subject: string, unsubscribe: string): CorpusMessage => ({
    name,
    body: {},
    expect: {
      subject,
      text: `Hallo Zoë aus Zürich (Grün),\n\n${NEWSLETTER_PARAGRAPH}\n\nAbmelden: ${unsubscribe}\n`,
      html: `<p>Hallo Zoë Ångström aus Zürich (Grün),</p>\n<p>${NEWSLETTER_PARAGRAPH}</p>\n<p><a href="${unsubscribe}">Abmelden</a></p>\n`,
      headers: { 'list-unsubscribe-post': 'List-Unsubscribe=One-Click' },
    },
  });
  /** The one-click unsubscribe URL of a message as it arrived (RFC 8058's List-Unsubscribe). */
  const listUnsubscribeOf = (bytes: Buffer): string => {
    const url = /^List-Unsubscribe: <(https:[^>]+)>/im.exec(
      bytes.toString('latin1').replace(/\r\n[ \t]/g, ' '),
    )?.[1];
    assert.ok(url !== undefined && url.startsWith(`${PUBLIC_URL}/u/`), `List-Unsubscribe: ${url}`);
    return url;
  };
  /**
   * Checks the newsletter as it arrived (`copy`) and as GET /v1/emails/{id} shows it (its broadcast, its
   * subject); its one-click unsubscribe URL.
   */
  const newsletterArrived = async (
    name: string,
    emailId: string,
    copy: { bytes: Buffer; from: string },
    expected: { broadcastId: string | null; subject: string },
  ): Promise<string> => {
    const email = await api.request('GET', `/v1/emails/${emailId}`);
    assert.equal(email.body.broadcast_id, expected.broadcastId);
    assert.equal(email.body.subject, expected.subject);
    const unsubscribe = listUnsubscribeOf(copy.bytes);
    await checkArrived([
      {
        message: newsletterRead(name, expected.subject, unsubscribe),
        bytes: copy.bytes,
        sender: copy.from,
      },
    ]);
    return unsubscribe;
  };
  /** A one-click unsubscribe as a mailbox provider makes it. */
  const oneClick = async (url: string) => {
    const post = await fetch(onServer(url, api.baseUrl), {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'List-Unsubscribe=One-Click',
    });
    assert.equal(post.status, 200);
  };
  /** The newsletter's reader (RECIPIENT) in a segment, with its properties and a topic: made once. */
  let readers: Promise<{ contactId: string; topicId: string; segmentId: string }> | undefined;
  const newsletterReaders = () =>
    (readers ??= (async () => {
      await created('/v1/contact-properties', { key: 'stadt', type: 'string', fallback_value: 'Überall' });
      await created('/v1/contact-properties', { key: 'tier', type: 'string', fallback_value: 'Grün' });
      const topic = await created('/v1/topics', { name: 'Neuigkeiten', default_subscription: 'opt_in' });
      const segment = await created('/v1/segments', { name: 'Leser' });
      const contact = await created('/v1/contacts', {
        email: RECIPIENT,
        first_name: 'Zoë',
        last_name: 'Ångström',
        properties: { stadt: 'Zürich' },
      });
      const added = await api.request('POST', `/v1/contacts/${contact.id}/segments/${segment.id}`);
      assert.equal(added.status, 200, JSON.stringify(added.body));
      return { contactId: contact.id, topicId: topic.id, segmentId: segment.id };
    })());
  /** The newsletter as a broadcast to its readers' segment and topic (a draft unless `extra` sends it). */
  const newsletterBroadcast = async (name: string, extra: Record<string, unknown> = {}) => {
    const { topicId, segmentId } = await newsletterReaders();
    return created('/v1/broadcasts', {
      name,
      ...NEWSLETTER,
      segment_id: segmentId,
      topic_id: topicId,
      ...extra,
    });
  };
  const topicChoice = async (contactId: string, topicId: string) =>
    (await api.request('GET', `/v1/contacts/${contactId}/topics`)).body.data.find(
      (row: any) => row.topic_id === topicId,
    ).subscription;

  test('relay: a broadcast copy, personalized, with its topic-scoped one-click unsubscribe', async () => {
    // A copy of the newsletter, with RFC 8058's headers scoped to the broadcast's topic. It must verify and
    // read back as any other send does.
    const { contactId, topicId } = await newsletterReaders();
    const broadcast = await newsletterBroadcast('Fidelity', { send: true });
    const { id: emailId, copy } = await madeAndRelayed(
      await startFanOutWorker(api, { clock: systemClock }),
      RECIPIENT,
      async () => {
        const row = await until(
          async () =>
            (await api.request('GET', `/v1/broadcasts/${broadcast.id}/recipients`)).body.data?.[0] as
              { email_id: string } | undefined,
          10_000,
          'the copy to be made',
        );
        return row.email_id;
      },
    );
    // A copy is an ordinary email: GET /v1/emails/{id} shows it, naming its broadcast.
    const unsubscribe = await newsletterArrived('a broadcast copy', emailId, copy, {
      broadcastId: broadcast.id,
      subject: 'Grüße, Zoë — 日本語 🎉',
    });

    // The link works as a mailbox provider's one click uses it: out of the topic only, at once.
    await oneClick(unsubscribe);
    assert.equal(await topicChoice(contactId, topicId), 'opt_out');
    assert.equal((await api.request('GET', `/v1/contacts/${contactId}`)).body.unsubscribed, false);
  });

  test("relay: a broadcast's test send, personalized as its reader, with the test address's own unsubscribe", async () => {
    // POST /v1/broadcasts/{id}/test, of a draft, to an editor's address, personalized as the reader: an
    // ordinary email (no broadcast_id) whose subject says [Test], made by the fan-out's code, that must
    // verify and read back as a copy does.
    const { contactId, topicId } = await newsletterReaders();
    const broadcast = await newsletterBroadcast('Fidelity test send');
    assert.equal(broadcast.status, 'draft');
    const editor = 'editor@receiver.test';
    const { id: emailId, copy } = await madeAndRelayed(undefined, editor, async () => {
      const sent = await api.request('POST', `/v1/broadcasts/${broadcast.id}/test`, {
        body: { to: `Ed Itor <${editor}>`, contact: contactId },
      });
      assert.equal(sent.status, 202, JSON.stringify(sent.body));
      assert.equal(sent.body.contact_id, contactId);
      return sent.body.email_id;
    });
    const unsubscribe = await newsletterArrived("a broadcast's test send", emailId, copy, {
      broadcastId: null,
      subject: '[Test] Grüße, Zoë — 日本語 🎉',
    });

    // Its link is the test address's own: a click there never unsubscribes the reader it was made as.
    const choice = await topicChoice(contactId, topicId);
    await oneClick(unsubscribe);
    assert.equal(await topicChoice(contactId, topicId), choice);
    assert.equal((await api.request('GET', `/v1/contacts/${contactId}`)).body.unsubscribed, false);
  });

  test("relay: an automation's send_email, its template filled from the contact and the event", async () => {
    const long = `${'Schöne Grüße aus Köln — ça va? 日本語 🎉 and a sentence with no line break in it; '.repeat(25)}fin.`;
    const template = await publishedTemplate(api, {
      name: 'Fidelity welcome',
      subject: 'Willkommen, {{ contact.first_name }} ({{ event.plan }}) ✓',
      html: `<p>Hallo {{ contact.first_name }}, Plan: <b>{{ event.plan }}</b>.</p>\n<p>${long}</p>\n`,
      text: `Hallo {{ contact.first_name }}, Plan: {{ event.plan }}.\n\n${long}\n`,
    });
    const automation = await api.request('POST', '/v1/automations', {
      body: {
        name: 'Fidelity welcome',
        status: 'enabled',
        steps: [
          { key: 'start', type: 'trigger', config: { event_name: 'fidelity.signed_up' } },
          {
            key: 'welcome',
            type: 'send_email',
            config: { template: { id: template }, from: `Acme <hello@${DOMAIN}>` },
          },
        ],
        connections: [{ from: 'start', to: 'welcome' }],
      },
    });
    assert.equal(automation.status, 201, JSON.stringify(automation.body));
    const { copy } = await madeAndRelayed(
      await startRunWorker(api, systemClock),
      'lin@receiver.test',
      async () => {
        const contact = await api.request('POST', '/v1/contacts', {
          body: { email: 'lin@receiver.test', first_name: 'Lín' },
        });
        assert.equal(contact.status, 201, JSON.stringify(contact.body));
        const sent = await api.request('POST', '/v1/custom-events/send', {
          body: { event: 'fidelity.signed_up', email: 'lin@receiver.test', payload: { plan: 'Größer' } },
        });
        assert.equal(sent.status, 201, JSON.stringify(sent.body));
        return until(
          async () => {
            const list = await api.request('GET', `/v1/automations/${automation.body.id}/runs`);
            const run = list.body.data?.[0];
            if (!run) return undefined;
            const got = await api.request('GET', `/v1/automations/${automation.body.id}/runs/${run.id}`);
            return got.body.steps?.find((step: any) => step.key === 'welcome')?.output?.email_id as string;
          },
          10_000,
          'the send_email step',
        );
      },
    );
    const message: CorpusMessage = {
      name: "an automation's send_email",
      body: {},
      expect: {
        subject: 'Willkommen, Lín (Größer) ✓',
        text: `Hallo Lín, Plan: Größer.\n\n${long}\n`,
        html: `<p>Hallo Lín, Plan: <b>Größer</b>.</p>\n<p>${long}</p>\n`,
      },
    };
    await checkArrived([{ message, bytes: copy.bytes, sender: copy.from }]);
  });

  test('relay through a real Postfix into a mailbox', async () => {
    const ids = await sendCorpus(
      baseConfig({ MAIL_TRANSPORT: 'relay', SMTP_URL: `smtp://127.0.0.1:${postfix.port}` }),
    );
    const delivered = await postfix.waitForMailbox(RECIPIENT, ids.length);
    const arrived = [];
    for (const [index, id] of ids.entries()) {
      const messageId = await messageIdOf(id);
      const copy = delivered.find((bytes) => bytes.toString('latin1').includes(`Message-ID: ${messageId}`));
      assert.ok(copy, `${corpus[index]!.name}: in the mailbox`);
      const sender = /^Return-Path: <([^>]*)>/im.exec(copy.toString('latin1'))?.[1] ?? '';
      // A Maildir keeps lines with LF, as Unix mailboxes do; the message travelled with CRLF (a bare CR in
      // it would show here as a CR before an LF, which the CRLF check then finds).
      const crlf = Buffer.from(copy.toString('latin1').replace(/\n/g, '\r\n'), 'latin1');
      arrived.push({ message: corpus[index]!, bytes: crlf, sender });
    }
    await checkArrived(arrived);
  });
});
