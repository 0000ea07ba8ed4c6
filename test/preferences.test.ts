import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createSecretBox } from '../src/lib/crypto.ts';
import { resendCopy } from '../src/modules/broadcasts/personalization.ts';
import { createPreferenceTokens, PREFERENCE_LINK_DAYS } from '../src/modules/engagement/tokens.ts';
import { EVENT_KIND_NAMES } from '../src/modules/event-kinds/event-kinds.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import type { QueueWorker } from '../src/queue/runtime.ts';
import { systemClock } from '../src/lib/clock.ts';
import { ALL_ENGINES, engineSkip, startTestApp, TEST_ENCRYPTION_KEY, type TestApp } from './helpers/app.ts';
import { created } from './helpers/answers.ts';
import { onServer, parseMail, waitForEvent } from './helpers/engagement.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { startFanOutWorker } from './helpers/fan-out.ts';
import { startSendingWorker } from './helpers/sending.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';

// The preference page on PUBLIC_URL (issue 37, item 3): a signed per-contact link where a person sees the
// project's topics, changes them and unsubscribes from all, each change at once with its contact event; every
// byte of the request hostile (bad, forged, expired tokens, a form from elsewhere); and a broadcast's copy
// carrying the link. The browser and axe side is in test/audience-dashboard.test.ts.

const PUBLIC_URL = 'https://mail.acme.test';
const tokens = createPreferenceTokens(createSecretBox(TEST_ENCRYPTION_KEY));
const DAY = 86_400_000;

for (const engine of ALL_ENGINES) {
  describe(`the preference page (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let receiver: Receiver;
    let news: { id: string };
    let offers: { id: string };
    let contactId: string;
    let page: string;

    const form = (fields: Array<[string, string]>, headers: Record<string, string> = {}) =>
      fetch(page, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
        body: new URLSearchParams(fields).toString(),
        redirect: 'manual',
      });
    const subscriptions = async () => {
      const topics = await api.request('GET', `/v1/contacts/${contactId}/topics`);
      return Object.fromEntries(topics.body.data.map((row: any) => [row.name, row.subscription]));
    };

    before(async () => {
      api = await startTestApp(engine, { allowPrivateUrls: true, worker: true, publicUrl: PUBLIC_URL });
      receiver = await startReceiver();
      await created(api, '/v1/webhooks', { url: receiver.url, events: EVENT_KIND_NAMES });
      news = await created(api, '/v1/topics', {
        name: 'News & <updates>',
        description: 'Once a month, what shipped.',
        default_subscription: 'opt_in',
      });
      offers = await created(api, '/v1/topics', { name: 'Offers', default_subscription: 'opt_out' });
      const contact = await created(api, '/v1/contacts', { email: 'zoe@acme.test', first_name: 'Zoë' });
      contactId = contact.id;
      page = `${api.baseUrl}/p/${tokens.make(contactId, new Date())}`;
    });
    after(async () => {
      await receiver?.close();
      await api?.close();
    });

    test('GET shows the address and every topic with the current subscription, escaped, unframeable', async () => {
      const response = await fetch(page);
      assert.equal(response.status, 200);
      assert.equal(response.headers.get('content-type'), 'text/html; charset=utf-8');
      assert.match(response.headers.get('content-security-policy')!, /frame-ancestors 'none'/);
      assert.match(response.headers.get('cache-control')!, /no-store/);
      assert.equal(response.headers.get('referrer-policy'), 'no-referrer');
      const body = await response.text();
      assert.match(body, /<h1>Your email preferences<\/h1>/);
      assert.match(body, /For <strong>zoe@acme\.test<\/strong>/);
      assert.match(body, /<label for="topic-top_[0-9a-z]+">News &amp; &lt;updates&gt;<\/label>/);
      assert.match(body, /Once a month, what shipped\./);
      assert.match(body, new RegExp(`value="${news.id}" id="topic-${news.id}" checked`));
      assert.match(body, new RegExp(`value="${offers.id}" id="topic-${offers.id}">`));
      assert.doesNotMatch(body, new RegExp(`value="${offers.id}" id="topic-${offers.id}" checked`));
      assert.match(body, /Unsubscribe from all/);
      assert.doesNotMatch(body, /<script/i);
    });

    test('saving the boxes changes each topic at once, with contact.topics_updated', async () => {
      const token = new URL(page).pathname.slice(3);
      const response = await form([
        ['token', token],
        ['action', 'save'],
        ['shown', `${news.id},${offers.id}`],
        ['topic', offers.id],
      ]);
      assert.equal(response.status, 200);
      const body = await response.text();
      assert.match(body, /role="status">Your choices are saved\./);
      assert.deepEqual(await subscriptions(), { 'News & <updates>': 'opt_out', Offers: 'opt_in' });
      const event = await waitForEvent(
        receiver,
        (each) => each.type === 'contact.topics_updated' && each.data.id === contactId,
      );
      assert.deepEqual(
        [...event.data.topics].sort((a: any, b: any) => a.id.localeCompare(b.id)),
        [
          { id: news.id, subscription: 'opt_out', previous_subscription: 'opt_in' },
          { id: offers.id, subscription: 'opt_in', previous_subscription: 'opt_out' },
        ].sort((a, b) => a.id.localeCompare(b.id)),
      );
      // The page shown after it is the new state.
      assert.match(body, new RegExp(`value="${offers.id}" id="topic-${offers.id}" checked`));

      // The same form again changes nothing and says so.
      const again = await form([
        ['token', token],
        ['action', 'save'],
        ['shown', `${news.id},${offers.id}`],
        ['topic', offers.id],
      ]);
      assert.match(await again.text(), /Nothing changed: your choices were already saved\./);
    });

    test('a topic the page did not show, or another project’s, is left alone', async () => {
      const token = new URL(page).pathname.slice(3);
      const later = await created(api, '/v1/topics', { name: 'Later', default_subscription: 'opt_in' });
      const response = await form([
        ['token', token],
        ['action', 'save'],
        ['shown', `${news.id},${offers.id},top_00000000000000000000000000`],
        ['topic', offers.id],
        ['topic', 'top_00000000000000000000000000'],
      ]);
      assert.equal(response.status, 200);
      assert.equal((await subscriptions()).Later, 'opt_in');
      assert.equal((await api.request('DELETE', `/v1/topics/${later.id}`)).status, 200);
    });

    test('unsubscribe from all, and back: contact.updated each time', async () => {
      const token = new URL(page).pathname.slice(3);
      const off = await form([
        ['token', token],
        ['action', 'unsubscribe_all'],
      ]);
      assert.equal(off.status, 200);
      const offBody = await off.text();
      assert.match(offBody, /You are unsubscribed from all of these emails\./);
      assert.match(offBody, /Subscribe again/);
      assert.equal((await api.request('GET', `/v1/contacts/${contactId}`)).body.unsubscribed, true);
      await waitForEvent(
        receiver,
        (each) => each.type === 'contact.updated' && each.data.id === contactId && each.data.unsubscribed,
      );
      const on = await form([
        ['token', token],
        ['action', 'resubscribe'],
      ]);
      assert.equal(on.status, 200);
      assert.equal((await api.request('GET', `/v1/contacts/${contactId}`)).body.unsubscribed, false);
      await waitForEvent(
        receiver,
        (each) => each.type === 'contact.updated' && each.data.id === contactId && !each.data.unsubscribed,
      );
    });

    test('hostile requests: a clear 4xx page, never a 500, never a redirect, nothing changed', async () => {
      const token = new URL(page).pathname.slice(3);
      const before = await subscriptions();
      const forged = token.slice(0, -1) + (token.endsWith('a') ? 'b' : 'a');
      const otherContact = tokens.make('con_00000000000000000000000000', new Date());
      const expired = tokens.make(contactId, new Date(Date.now() - (PREFERENCE_LINK_DAYS + 2) * DAY));
      const cases: Array<[string, number, RegExp]> = [
        [forged, 404, /Link not found/],
        [otherContact, 404, /Link not found/],
        ['x'.repeat(46), 404, /Link not found/],
        ['%2e%2e%2f%2e%2e%2fv1%2femails', 404, /Link not found/],
        ['a'.repeat(65), 404, /Link not found/],
        [expired, 410, /Link expired/],
      ];
      for (const [path, status, words] of cases) {
        for (const method of ['GET', 'POST']) {
          const response = await fetch(`${api.baseUrl}/p/${path}`, {
            method,
            headers: { 'content-type': 'application/x-www-form-urlencoded' },
            body: method === 'POST' ? `token=${path}&action=unsubscribe_all` : undefined,
            redirect: 'manual',
          });
          assert.equal(response.status, status, `${method} ${path}`);
          assert.equal(response.headers.get('location'), null);
          assert.match(await response.text(), words);
        }
      }
      // A path that is not even valid percent-encoding: the server's own 400 before any route.
      assert.equal((await fetch(`${api.baseUrl}/p/%00%ff%zz`)).status, 400);
      // A form without the page's token, or one the browser says came from another site.
      const missing = await form([['action', 'unsubscribe_all']]);
      assert.equal(missing.status, 403);
      assert.match(await missing.text(), /did not come from the preference page/);
      const crossSite = await form(
        [
          ['token', token],
          ['action', 'unsubscribe_all'],
        ],
        { 'sec-fetch-site': 'cross-site', origin: 'https://evil.example' },
      );
      assert.equal(crossSite.status, 403);
      // Nonsense of every kind: a 400 page, or the same page with nothing changed.
      const nonsense = await form([
        ['token', token],
        ['action', 'drop_tables'],
      ]);
      assert.equal(nonsense.status, 400);
      assert.match(await nonsense.text(), /asked for nothing this page does/);
      for (const body of [
        Buffer.from([0xff, 0xfe, 0x00, 0x26, 0x3d]),
        `token=${token}&action=save&shown=${'%'.repeat(200)}&topic=%E0%A4%A`,
        '--x\r\nContent-Disposition: form-data; name="action"\r\n\r\nunsubscribe_all\r\n--x--',
      ]) {
        const response = await fetch(page, {
          method: 'POST',
          headers: { 'content-type': 'multipart/form-data; boundary=x' },
          body,
          redirect: 'manual',
        });
        assert.ok([200, 400, 403].includes(response.status), String(response.status));
      }
      const tooBig = await fetch(page, { method: 'POST', body: `token=${token}&${'a'.repeat(9000)}` });
      assert.equal(tooBig.status, 413);
      assert.deepEqual(await subscriptions(), before);
      assert.equal((await api.request('GET', `/v1/contacts/${contactId}`)).body.unsubscribed, false);

      // A deleted contact's link leads nowhere.
      const gone = await created(api, '/v1/contacts', { email: 'gone@acme.test' });
      const goneLink = `${api.baseUrl}/p/${tokens.make(gone.id, new Date())}`;
      assert.equal((await fetch(goneLink)).status, 200);
      assert.equal((await api.request('DELETE', `/v1/contacts/${gone.id}`)).status, 200);
      const after = await fetch(goneLink);
      assert.equal(after.status, 404);
    });
  });
}

describe('a broadcast copy carries its contact’s preference link', { skip: engineSkip('sqlite') }, () => {
  let api: TestApp;
  let smtp: TestSmtpServer;
  let sending: SendingWorker;
  let fanOut: QueueWorker;

  before(async () => {
    api = await startTestApp('sqlite', { allowPrivateUrls: true, worker: true, publicUrl: PUBLIC_URL });
    smtp = await startSmtpServer();
    sending = await startSendingWorker(api, { relayPort: smtp.port, publicUrl: PUBLIC_URL });
    fanOut = await startFanOutWorker(api, { clock: systemClock });
  });
  after(async () => {
    await fanOut?.stop();
    await sending?.stop();
    await smtp?.close();
    await api?.close();
  });

  test('{{ preferences_url }}: the page of the contact, not click-tracked; the unsubscribe page links it', async () => {
    const segment = await created(api, '/v1/segments', { name: 'Readers' });
    const ada = await created(api, '/v1/contacts', { email: 'ada@readers.test', first_name: 'Ada' });
    assert.equal((await api.request('POST', `/v1/contacts/${ada.id}/segments/${segment.id}`)).status, 200);
    await created(api, '/v1/broadcasts', {
      from: 'Acme <news@acme.test>',
      subject: 'November',
      html: '<html><body><p>Hi {{ contact.first_name }}</p><a href="https://acme.test/post">Read</a><p><a href="{{ preferences_url }}">Your preferences</a></p></body></html>',
      text: 'Hi {{ contact.first_name }}.\nPreferences: {{ preferences_url }}',
      segment_id: segment.id,
      tracking: { clicks: true },
      send: true,
    });
    const [message] = await smtp.waitFor(1, 30_000);
    const mail = await parseMail(message!.raw);
    const link = /href="([^"]+\/p\/[0-9a-z]+)"/.exec(mail.html)?.[1];
    assert.ok(link?.startsWith(`${PUBLIC_URL}/p/`), mail.html);
    assert.ok(mail.text.includes(`Preferences: ${link}`), mail.text);
    // The other link is tracked; the preference link goes straight to its page.
    assert.match(mail.html, new RegExp(`href="${PUBLIC_URL}/c/`));
    const shown = await fetch(onServer(link!, api.baseUrl));
    assert.equal(shown.status, 200);
    assert.match(await shown.text(), /For <strong>ada@readers\.test<\/strong>/);

    // The copy's one-click unsubscribe page leads there too (a copy that does not write the link still has it).
    const confirm = await fetch(onServer(mail.unsubscribeUrl!, api.baseUrl));
    assert.equal(confirm.status, 200);
    const relative = /<a href="(\.\.\/p\/[0-9a-z]+)">Choose which emails you get<\/a>/.exec(
      await confirm.text(),
    )?.[1];
    assert.ok(relative);
    const resolved = new URL(relative, onServer(mail.unsubscribeUrl!, api.baseUrl)).href;
    const fromUnsubscribe = await fetch(resolved);
    assert.equal(fromUnsubscribe.status, 200);
    assert.match(await fromUnsubscribe.text(), /For <strong>ada@readers\.test<\/strong>/);
  });
});

test('{{{PREFERENCES_URL}}} in Resend’s dialect: the contact’s link, escaped in html', () => {
  const contact = {
    id: 'con_00000000000000000000000000',
    projectId: 'proj_00000000000000000000000000',
    email: 'ada@readers.test',
    firstName: 'Ada',
    lastName: null,
    unsubscribed: false,
    values: {},
    createdAt: '2026-11-01T00:00:00.000Z',
    updatedAt: '2026-11-01T00:00:00.000Z',
  };
  const url = 'https://mail.acme.test/p/abc?x=1&y=2';
  const copy = resendCopy(
    {
      subject: 'Hi {{{FIRST_NAME}}}',
      html: '<a href="{{{PREFERENCES_URL}}}">Prefs</a>',
      text: 'Prefs: {{{ preferences_url }}}',
    },
    contact,
    [],
    url,
  );
  assert.deepEqual(copy, {
    subject: 'Hi Ada',
    html: '<a href="https://mail.acme.test/p/abc?x=1&amp;y=2">Prefs</a>',
    text: `Prefs: ${url}`,
  });
});
