// The dashboard running a project (issue 28): cancelling a scheduled email, rotating a domain's DKIM key, the
// email page's attachments, Reply-To, cc, authentication and tracking, the overview's unique opens and clicks
// (against GET /v1/stats), failing webhooks in the list, every section reachable at 390 px, visible focus,
// the API's validation messages, and axe-core on every page (0 serious or critical violations). One app, one
// browser, one signed-in page for all of them; Debian's chromium as in test/dashboard.test.ts.
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import type { Clock } from '../src/lib/clock.ts';
import { inTransaction } from '../src/db/transaction.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { axeViolations, BROWSER_SKIP, launchBrowser, seriousViolations } from './helpers/browser.ts';
import { BROWSER, onServer, parseMail } from './helpers/engagement.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';
import { until } from './helpers/until.ts';
import { startSendingWorker } from './helpers/sending.ts';

const skip = BROWSER_SKIP;
const PUBLIC_URL = 'https://track.acme.example';
/** With SCREENSHOTS=1, pictures of what these tests look at go to test/screenshots/project-*.png. */
const SCREENSHOTS = process.env.SCREENSHOTS === '1';
const SCREENSHOT_DIR = fileURLToPath(new URL('./screenshots/', import.meta.url));
const screenshot = async (target: Page, name: string) => {
  if (!SCREENSHOTS) return;
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  await target.screenshot({ path: path.join(SCREENSHOT_DIR, `project-${name}.png`), fullPage: true });
};

/** What the dashboard's formatTime shows for an ISO time. */
const shownTime = (iso: string) => `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC`;

describe('the dashboard runs a project', { skip }, () => {
  let api: TestApp;
  let sender: SendingWorker;
  let failing: Receiver;
  let browser: Browser;
  let page: Page;
  /** Moved on to make a later fetch a person's (a fetch within 2 s of delivery counts as a machine's). */
  let offset = 0;
  const clock: Clock = { now: () => new Date(Date.now() + offset) };
  const pageErrors: string[] = [];

  const waitDelivered = async (id: string) => {
    let status: string | undefined;
    await until(
      async () => (status = (await api.request('GET', `/v1/emails/${id}`)).body.status) === 'delivered',
      10_000,
      `${id} delivered`,
    ).catch((error) => {
      throw new Error(`${error.message} (it is ${status})`);
    });
  };
  const send = async (body: Record<string, unknown>) => {
    const response = await api.request('POST', '/v1/emails', { body });
    assert.equal(response.status, 202, JSON.stringify(response.body));
    return response.body.id as string;
  };
  const heading = (target: Page, name: string) => target.getByRole('heading', { name, level: 1 }).waitFor();
  const loaded = async (target: Page) => {
    await target.locator('main h1').first().waitFor();
    await target.locator('[aria-busy="true"]').first().waitFor({ state: 'detached' });
  };

  before(async () => {
    api = await startTestApp('sqlite', {
      allowPrivateUrls: true,
      publicUrl: PUBLIC_URL,
      clock,
      worker: { schedule: [0], clock },
    });
    failing = await startReceiver({ fallback: { status: 500, body: 'down' } });
    sender = await startSendingWorker(api, { clock, publicUrl: PUBLIC_URL });
    browser = await launchBrowser();
    const context = await browser.newContext({
      viewport: { width: 1280, height: 900 },
      baseURL: api.baseUrl,
      timezoneId: 'UTC',
    });
    page = await context.newPage();
    page.on('pageerror', (error) => pageErrors.push(error.message));
    await page.goto('/');
    await page.getByLabel('API key').fill(api.key);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await heading(page, 'Overview');
  });

  after(async () => {
    await browser?.close();
    await sender?.stop();
    await failing?.close();
    await api?.close();
  });

  test('the email page: attachments, Reply-To, cc, DKIM and DMARC, the SMTP reply once, "tracking off"', async () => {
    const id = await send({
      from: 'Acme <shop@acme.example>',
      to: 'ada@example.org',
      cc: ['bob@example.org'],
      reply_to: ['support@acme.example'],
      subject: 'Your invoice',
      html: '<p>Invoice attached</p>',
      attachments: [
        { filename: 'invoice.pdf', content: Buffer.alloc(2048, 1).toString('base64') },
        {
          filename: 'notes.txt',
          content: Buffer.from('hello').toString('base64'),
          content_type: 'text/plain',
        },
      ],
    });
    await waitDelivered(id);
    const email = (await api.request('GET', `/v1/emails/${id}`)).body;
    assert.deepEqual(email.tracking, { opens: false, clicks: false, unsubscribe: false });
    await page.goto(`/dashboard/emails/${id}`);
    await heading(page, 'Your invoice');

    const fact = (name: string) => page.locator(`dt:text-is("${name}") + dd`).innerText();
    assert.equal(await fact('Reply-To'), 'support@acme.example');
    assert.equal(await fact('Cc'), 'bob@example.org');
    const attachments = page.getByTestId('attachments').locator('li');
    assert.deepEqual(
      (await attachments.allInnerTexts()).map((text) => text.replace(/\s+/g, ' ')),
      ['invoice.pdf application/pdf 2.0 KB', 'notes.txt text/plain 5 B'],
    );
    // The authentication as the API states it.
    const { dkim_domain: dkim, dmarc_aligned: aligned } = email.authentication;
    assert.equal(await page.getByTestId('dkim').innerText(), dkim ? `signed as ${dkim}` : 'not signed');
    assert.match(await page.getByTestId('dmarc').innerText(), aligned ? /^aligned/ : /^not aligned/);
    assert.equal(await page.getByTestId('tracking').innerText(), 'off');

    // Each recipient: "tracking off" (not "opens 0 · clicks 0"), and the transport's reply exactly once.
    for (const recipient of email.recipients) {
      const card = page.locator(`.recipient[data-recipient="${recipient.address}"]`);
      assert.equal(await card.getByTestId('engagement').innerText(), ' · tracking off');
      const text = await card.innerText();
      assert.ok(recipient.last_response, 'the capture transport replied');
      assert.equal(text.split(recipient.last_response).length - 1, 1, text);
    }
    await screenshot(page, 'email');
  });

  test("a scheduled email is rescheduled from its page (a past time refused in the API's words)", async () => {
    const id = await send({
      from: 'shop@acme.example',
      to: 'ada@example.org',
      subject: 'Next week',
      text: 'later',
      scheduled_at: new Date(clock.now().getTime() + 3_600_000).toISOString(),
    });
    await page.goto(`/dashboard/emails/${id}`);
    await heading(page, 'Next week');
    // The browser's clock is UTC (the context's time zone): the input's local time is the UTC time.
    const input = (date: Date) => date.toISOString().slice(0, 16);
    const field = page.getByLabel('Send at (your local time)');
    await field.fill(input(new Date(Date.now() - 86_400_000)));
    await page.getByRole('button', { name: 'Reschedule' }).click();
    const error = page.locator('.field-error[data-param="scheduled_at"]');
    await error.waitFor();
    const refused = await api.request('PATCH', `/v1/emails/${id}`, {
      body: { scheduled_at: new Date(Date.now() - 86_400_000).toISOString() },
    });
    assert.equal(refused.status, 422);
    assert.equal(await error.innerText(), refused.body.error.message);

    const later = new Date(Math.ceil((Date.now() + 2 * 3_600_000) / 60_000) * 60_000);
    await field.fill(input(later));
    await page.getByRole('button', { name: 'Reschedule' }).click();
    await page.getByText(`Rescheduled: it will be sent at ${shownTime(later.toISOString())}.`).waitFor();
    await page.getByRole('heading', { name: `Scheduled for ${shownTime(later.toISOString())}` }).waitFor();
    const email = (await api.request('GET', `/v1/emails/${id}`)).body;
    assert.deepEqual([email.status, email.scheduled_at], ['scheduled', later.toISOString()]);
    await screenshot(page, 'email-rescheduled');
  });

  test('a scheduled email is cancelled from its page, after confirming', async () => {
    const scheduledAt = new Date(clock.now().getTime() + 3_600_000).toISOString();
    const id = await send({
      from: 'shop@acme.example',
      to: 'ada@example.org',
      subject: 'Tomorrow',
      text: 'later',
      scheduled_at: scheduledAt,
    });
    await page.goto(`/dashboard/emails/${id}`);
    await heading(page, 'Tomorrow');
    await page.locator('.toolbar .chip', { hasText: 'scheduled' }).waitFor();
    // Cancelling the dialog keeps it scheduled.
    await page.getByRole('button', { name: 'Cancel email' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Cancel', exact: true }).click();
    assert.equal((await api.request('GET', `/v1/emails/${id}`)).body.status, 'scheduled');
    await page.getByRole('button', { name: 'Cancel email' }).click();
    assert.match(await page.getByRole('dialog').innerText(), new RegExp(shownTime(scheduledAt)));
    await page.getByRole('dialog').getByRole('button', { name: 'Cancel email' }).click();
    await page.getByText('Cancelled: it will not be sent.').waitFor();
    await page.locator('.toolbar .chip', { hasText: 'cancelled' }).waitFor();
    assert.equal(await page.getByRole('button', { name: 'Cancel email' }).count(), 0);
    assert.equal((await api.request('GET', `/v1/emails/${id}`)).body.status, 'cancelled');
  });

  test("a domain's DKIM key is rotated after confirming; the new record to publish is shown", async () => {
    const created = await api.request('POST', '/v1/domains', { body: { name: 'rotate.example' } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const selector = created.body.dkim_selector;
    await page.goto('/dashboard/domains');
    await heading(page, 'Domains');
    const card = page.locator('[data-domain="rotate.example"]');
    await card.getByRole('button', { name: 'Rotate DKIM key' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Rotate key' }).click();
    const shown = card.getByTestId('rotation');
    await shown.waitFor();
    const after = (await api.request('GET', `/v1/domains/${created.body.id}`)).body;
    const next = after.records.find((record: { rotation?: string }) => record.rotation === 'next');
    assert.ok(next, 'the API has a next key');
    const text = await shown.innerText();
    assert.ok(text.includes(next.name), text);
    assert.ok(text.includes(next.value), text);
    assert.ok(text.includes(`selector ${selector} keeps signing`), text);
    await card.locator('tr[data-purpose]', { hasText: 'new key, signs once verified' }).waitFor();
    await screenshot(page, 'domain-rotated');
  });

  test('the overview shows unique opens and clicks, automated ones apart, as GET /v1/stats counts them', async () => {
    const id = await send({
      from: 'shop@acme.example',
      to: 'ada@example.org',
      subject: 'Tracked',
      html: '<p>Hi <a href="https://acme.example/offer">the offer</a></p>',
      tracking: { opens: true, clicks: true },
    });
    await waitDelivered(id);
    const mail = await parseMail((await api.request('GET', `/v1/emails/${id}/raw`)).body.raw);
    offset += 60_000; // a person reads it a minute after it arrived
    // Two opens by a person (one unique), two clicks by a link scanner (one unique, automated).
    for (let i = 0; i < 2; i++) {
      await fetch(onServer(mail.pixel!, api.baseUrl), { headers: { 'user-agent': BROWSER } });
      await fetch(onServer(mail.links[0]!, api.baseUrl), {
        redirect: 'manual',
        headers: { 'user-agent': 'Mozilla/5.0 (compatible; Proofpoint URL Defense)' },
      });
    }
    const today = new Date().toISOString().slice(0, 10);
    const since = new Date(Date.now() - 6 * 86_400_000).toISOString().slice(0, 10);
    const stats = (await api.request('GET', `/v1/stats?since=${since}&until=${today}`)).body.total;
    assert.deepEqual(
      [stats.opened, stats.unique_opens, stats.unique_opens_automated],
      [2, 1, 0],
      'the API counts one unique open',
    );
    assert.deepEqual([stats.clicked, stats.unique_clicks, stats.unique_clicks_automated], [2, 0, 1]);

    await page.goto('/dashboard/');
    await heading(page, 'Overview');
    await page.getByTestId('overview-source').waitFor();
    const stat = (key: string) => page.locator(`[data-stat="${key}"] .stat-value`).innerText();
    const automated = (key: string) => page.locator(`[data-stat="${key}"] .stat-value-automated`).innerText();
    const shown = {
      unique_opens: Number(await stat('unique_opens')),
      unique_opens_automated: Number(await automated('unique_opens')),
      unique_clicks: Number(await stat('unique_clicks')),
      unique_clicks_automated: Number(await automated('unique_clicks')),
    };
    assert.deepEqual(shown, {
      unique_opens: stats.unique_opens,
      unique_opens_automated: stats.unique_opens_automated,
      unique_clicks: stats.unique_clicks,
      unique_clicks_automated: stats.unique_clicks_automated,
    });
    assert.match(
      await page.locator('[data-stat="unique_clicks"]').innerText(),
      /Unique clicks\s+0\s+\+ 1 automated/,
    );
    await screenshot(page, 'overview');
  });

  test('the webhooks list: failing since …, disabled with its reason, enabled only when it works', async () => {
    const create = async (url: string) =>
      (await api.request('POST', '/v1/webhooks', { body: { url, events: ['email.sent'] } })).body.data.id;
    const failingId = await create(`${failing.url}/hooks`);
    const gone = await create(`${failing.url}/gone`);
    await api.database.handle.db
      .updateTable('webhooks')
      .set({ enabled: false, disabled_reason: 'The endpoint answered 410 Gone.' })
      .where('id', '=', gone)
      .execute();
    await api.events.emit(api.projectId, 'email.sent', {});
    await until(
      async () => (await api.request('GET', `/v1/webhooks/${failingId}`)).body.data.failing_since !== null,
      10_000,
      'the webhook failing',
    );
    const since = (await api.request('GET', `/v1/webhooks/${failingId}`)).body.data.failing_since;
    await page.goto('/dashboard/webhooks');
    await heading(page, 'Webhooks');
    const health = (url: string) =>
      page.locator('tr', { hasText: url }).getByTestId('webhook-health').innerText();
    assert.equal(
      await health(`${failing.url}/hooks`),
      `failing\nEvery delivery has failed since ${shownTime(since)}.`,
    );
    assert.equal(await health(`${failing.url}/gone`), 'disabled\nDisabled: The endpoint answered 410 Gone.');
    await screenshot(page, 'webhooks');
  });

  test("a refused form shows the API's own message, next to the field it names", async () => {
    const expected = (
      await api.request('POST', '/v1/webhooks', { body: { url: 'https://hooks.acme.example/x', events: [] } })
    ).body.error;
    assert.equal(expected.message, "The field 'events' must have at least 1 item.");
    await page.goto('/dashboard/webhooks');
    await heading(page, 'Webhooks');
    await page.getByRole('button', { name: 'Add a webhook' }).click();
    await page.getByLabel('Endpoint URL').fill('https://hooks.acme.example/x');
    await page.getByRole('button', { name: 'Create webhook' }).click();
    const error = page.locator('.field-error[data-param="events"]');
    await error.waitFor();
    assert.equal(await error.innerText(), expected.message);
  });

  test('at 390 × 844 every section is in sight and clickable, with nothing wider than the window', async () => {
    const context = await browser.newContext({ viewport: { width: 390, height: 844 }, baseURL: api.baseUrl });
    const phone = await context.newPage();
    await phone.goto('/');
    await phone.evaluate((key) => sessionStorage.setItem('postwire.apiKey', key), api.key);
    await phone.goto('/dashboard/');
    await heading(phone, 'Overview');
    const links = phone.getByRole('navigation', { name: 'Sections' }).getByRole('link');
    const count = await links.count();
    assert.ok(count >= 10, `${count} links`);
    for (let i = 0; i < count; i++) {
      const box = (await links.nth(i).boundingBox())!;
      const name = await links.nth(i).innerText();
      assert.ok(
        box.x >= 0 && box.x + box.width <= 390,
        `${name} is within the width: ${JSON.stringify(box)}`,
      );
      assert.ok(
        box.y >= 0 && box.y + box.height <= 844,
        `${name} is within the height: ${JSON.stringify(box)}`,
      );
    }
    // Each one, clicked without scrolling, opens its page (the API reference is another app).
    for (let i = 0; i < count; i++) {
      const link = links.nth(i);
      if ((await link.getAttribute('href')) === '/docs') continue;
      await link.click();
      await phone.waitForURL(new URL((await link.getAttribute('href'))!, api.baseUrl).href);
      await loaded(phone);
      const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 0, `${phone.url()} overflows by ${overflow} px`);
      await phone.evaluate(() => window.scrollTo(0, 0));
    }
    await context.close();
  });

  test('at 1280 and 1440 px the menu is one line, nothing scrolls sideways, a suppressed recipient says why, and the API reference leads back', async () => {
    await api.request('POST', '/v1/suppressions', { body: { addresses: ['gone@example.org'] } });
    const id = await send({
      from: 'shop@acme.example',
      to: ['ada@example.org', 'gone@example.org'],
      subject: 'Partly suppressed',
      text: 'Hi',
    });
    await until(
      async () => (await api.request('GET', `/v1/emails/${id}`)).body.status === 'mixed',
      10_000,
      'the email mixed (one delivered, one suppressed)',
    );
    for (const width of [1280, 1440]) {
      const context = await browser.newContext({ viewport: { width, height: 900 }, baseURL: api.baseUrl });
      const wide = await context.newPage();
      wide.on('pageerror', (error) => pageErrors.push(error.message));
      await wide.goto('/');
      await wide.evaluate((key) => sessionStorage.setItem('postwire.apiKey', key), api.key);
      // The overview carries the widest numbers table (automated opens and clicks, from the test above).
      for (const url of ['/dashboard/', `/dashboard/emails/${id}`]) {
        await wide.goto(url);
        await loaded(wide);
        await wide.locator('main table, main .recipient').first().waitFor();
        // Neither the page nor a table in it scrolls sideways.
        const scrolled = await wide.evaluate(() =>
          [document.documentElement, ...document.querySelectorAll('.table-wrap')]
            .filter((element) => element.scrollWidth > element.clientWidth)
            .map(
              (element) =>
                `${element.className || element.tagName}: ${element.scrollWidth} > ${element.clientWidth}`,
            ),
        );
        assert.deepEqual(scrolled, [], `${url} at ${width} px`);
        // The menu's items share one line.
        const tops = await wide
          .getByRole('navigation', { name: 'Sections' })
          .getByRole('link')
          .evaluateAll((links) =>
            links.map((link) => `${link.textContent}: ${(link as HTMLElement).offsetTop}`),
          );
        assert.equal(tops.length, 12, tops.join(', '));
        assert.equal(
          new Set(tops.map((top) => top.split(': ')[1])).size,
          1,
          `one line at ${width} px: ${tops.join(', ')}`,
        );
      }
      const card = wide.locator('.recipient[data-recipient="gone@example.org"]');
      assert.equal(
        await card.getByTestId('suppression-reason').innerText(),
        'Not sent: the address is on the suppression list (manual).',
      );
      assert.equal(
        await wide
          .locator('.recipient[data-recipient="ada@example.org"]')
          .getByTestId('suppression-reason')
          .count(),
        0,
      );
      if (width === 1280) await screenshot(wide, 'suppressed-1280');

      // The API reference: its "Dashboard" link and its logo lead back, still signed in.
      await wide
        .getByRole('navigation', { name: 'Sections' })
        .getByRole('link', { name: 'API reference' })
        .click();
      await wide.locator('.swagger-ui .info .title').waitFor();
      assert.equal(
        await wide.getByRole('link', { name: 'Postwire dashboard' }).getAttribute('href'),
        '/dashboard/',
      );
      await wide.getByRole('link', { name: '← Dashboard' }).click();
      await heading(wide, 'Overview');
      await context.close();
    }
  });

  test('focus is visible on every control, and the selected tab stays readable when focused', async () => {
    const email = (await api.request('GET', '/v1/emails')).body.data[0].id;
    await page.goto(`/dashboard/emails/${email}`);
    await loaded(page);
    // Every Tab stop: a solid outline of at least 2 px in the dark brand colour.
    const seen = new Set<string>();
    for (let i = 0; i < 40; i++) {
      await page.keyboard.press('Tab');
      const focus = await page.evaluate(() => {
        const element = document.activeElement as HTMLElement;
        const style = getComputedStyle(element);
        return {
          name: `${element.tagName} ${element.textContent?.trim().slice(0, 30)}`,
          outline: `${style.outlineStyle} ${style.outlineWidth} ${style.outlineColor}`,
        };
      });
      if (focus.name.startsWith('BODY') || focus.name.startsWith('IFRAME')) continue;
      seen.add(focus.name);
      assert.equal(focus.outline, 'solid 3px rgb(55, 48, 163)', focus.name);
    }
    assert.ok(seen.size > 10, `${seen.size} controls reached`);
    const tab = page.getByRole('tab', { selected: true });
    await tab.focus();
    await tab.hover();
    const colours = await tab.evaluate((element) => {
      const style = getComputedStyle(element);
      return [style.color, style.backgroundColor];
    });
    assert.deepEqual(colours, ['rgb(255, 255, 255)', 'rgb(79, 70, 229)'], 'white on the brand colour');
  });

  test('the breaker pauses: the overview says why and resumes; a domain shows its compliance checks; axe-clean', async () => {
    // 200 sent and 20 hard bounces from news.acme.example: 9 % of 220, past the 5 % limit.
    const outcome = (kind: 'email.sent' | 'email.bounced', n: number) =>
      Array.from({ length: n }, (_, index) => ({
        projectId: api.projectId,
        kind,
        data: {
          email_id: `msg_${kind}_${index}`,
          from: 'news@news.acme.example',
          to: [`r${index}@example.org`],
          subject: 'Spring',
          tags: {},
          recipient: `r${index}@example.org`,
          ...(kind === 'email.bounced'
            ? { bounce: { type: 'hard', status: '5.1.1', diagnostic: null, reporting_mta: null } }
            : {}),
        },
      }));
    await inTransaction(api.database.handle.db, (transaction) =>
      api.events.emitIn(transaction, [...outcome('email.sent', 200), ...outcome('email.bounced', 20)]),
    );
    await api.services.reputation.evaluate();
    await page.goto('/dashboard/');
    await heading(page, 'Overview');
    const banner = page.getByTestId('reputation');
    await banner.waitFor();
    const text = await banner.innerText();
    assert.match(text, /^Sending is paused/);
    // The project (220 of its messages, with the ones the tests before sent) and the domain (220 exactly).
    assert.match(
      text,
      /\nnews\.acme\.example paused: hard bounces 9\.1\u00a0% \(limit 5\.0\u00a0%\), complaints — \(limit 0\.30\u00a0%\) over the last 7 days\. Its broadcasts are refused; transactional mail still goes\.\n/,
    );
    assert.match(text, /\nThis project paused: hard bounces \d\.\d\u00a0% \(limit 5\.0\u00a0%\)/);
    assert.deepEqual(await seriousViolations(page), []);
    await screenshot(page, 'reputation-paused');

    // The domains list as GET /v1/domains answers it, with the compliance a DNS check would have found.
    for (const name of ['checked.example', 'unchecked.example']) {
      const created = await api.request('POST', '/v1/domains', { body: { name } });
      assert.equal(created.status, 201, JSON.stringify(created.body));
    }
    const compliance = [
      { check: 'spf', status: 'pass', reason: 'v=spf1 include:_spf.acme.example -all' },
      { check: 'dkim_key', status: 'pass', reason: 'a 2048-bit RSA key' },
      {
        check: 'dmarc',
        status: 'warn',
        reason: 'p=none: receivers act on nothing, and BIMI needs quarantine or reject',
      },
      { check: 'reverse_dns', status: 'fail', reason: '192.0.2.10 has no PTR record' },
    ];
    await page.route('**/v1/domains?*', async (route) => {
      const response = await route.fetch();
      const body = await response.json();
      for (const domain of body.data) if (domain.name === 'checked.example') domain.compliance = compliance;
      await route.fulfill({ response, json: body });
    });
    await page.goto('/dashboard/domains');
    await loaded(page);
    const card = page.locator('[data-domain="checked.example"]');
    const rows = card.locator('table.compliance-checks tbody tr');
    await rows.first().waitFor();
    assert.deepEqual(
      await rows.evaluateAll((trs) => trs.map((tr) => [tr.dataset.check, tr.dataset.status])),
      compliance.map((check) => [check.check, check.status]),
    );
    assert.match(await card.locator('tr[data-check="dmarc"]').innerText(), /DMARC policy\s+warn\s+p=none/);
    // A domain not checked yet says so instead of a table.
    assert.match(
      await page.locator('[data-domain="unchecked.example"] [data-testid="compliance"]').innerText(),
      /Not checked yet: the next domain check \(Verify\) runs them\./,
    );
    assert.deepEqual(await seriousViolations(page), []);
    await screenshot(page, 'domain-compliance');
    await page.unroute('**/v1/domains?*');

    // Resumed from the overview: the banner goes, and the API says so.
    await page.goto('/dashboard/');
    await banner.getByRole('button', { name: 'Resume sending' }).click();
    await banner.waitFor({ state: 'detached' });
    const after = (await api.request('GET', '/v1/reputation')).body;
    assert.equal(after.sending_paused, false);
  });

  test('axe-core finds no serious or critical violation on any page', async () => {
    const email = (await api.request('GET', '/v1/emails')).body.data[0].id;
    // The rescheduled one above, still scheduled: its page has the reschedule form and the cancel button.
    const scheduled = (await api.request('GET', '/v1/emails?status=scheduled')).body.data[0].id;
    const webhook = (await api.request('GET', '/v1/webhooks')).body.data[0].id;
    const template = await api.request('POST', '/v1/templates', {
      body: { name: 'Welcome', subject: 'Hi {{ name }}', html: '<p>Hi {{ name }}</p>', variables: ['name'] },
    });
    assert.equal(template.status, 201, JSON.stringify(template.body));
    // Every section the top bar links to (a new one is checked without a change here), and the detail pages.
    await page.goto('/dashboard/');
    await heading(page, 'Overview');
    const sections = await page
      .getByRole('navigation', { name: 'Sections' })
      .getByRole('link')
      .evaluateAll((links) =>
        links.map((link) => link.getAttribute('href')!).filter((href) => href.startsWith('/dashboard')),
      );
    const urls = [
      ...sections,
      `/dashboard/emails/${email}`,
      `/dashboard/emails/${scheduled}?scheduled`,
      `/dashboard/webhooks/${webhook}`,
      `/dashboard/templates/${template.body.id}`,
      '/dashboard/routes',
    ];
    const counts: Record<string, Record<string, number>> = {};
    const bad: string[] = [];
    const check = async (target: Page, name: string) => {
      const violations = await axeViolations(target);
      const tally: Record<string, number> = { critical: 0, serious: 0, moderate: 0, minor: 0 };
      for (const violation of violations) tally[violation.impact] = (tally[violation.impact] ?? 0) + 1;
      counts[name] = tally;
      for (const violation of violations)
        if (violation.impact === 'serious' || violation.impact === 'critical')
          bad.push(`${name}: ${violation.id} (${violation.impact}) at ${violation.where}`);
    };
    // At 1280 px (the signed-in page) and at 390 px (the phone layout: stacked tables, the chart scrolling).
    const phoneContext = await browser.newContext({
      viewport: { width: 390, height: 844 },
      baseURL: api.baseUrl,
    });
    const phone = await phoneContext.newPage();
    await phone.goto('/');
    await heading(phone, 'Sign in');
    await check(phone, 'sign in (390 px)');
    await phone.evaluate((key) => sessionStorage.setItem('postwire.apiKey', key), api.key);
    for (const [target, width] of [
      [page, 1280],
      [phone, 390],
    ] as const) {
      for (const url of urls) {
        await target.goto(url);
        await loaded(target);
        await check(target, `${url.replace(/(msg|wh|tpl)_[0-9a-z]+/, ':id')} (${width} px)`);
      }
    }
    await phoneContext.close();
    const signedOut = await browser.newContext({ baseURL: api.baseUrl });
    const signIn = await signedOut.newPage();
    await signIn.goto('/');
    await heading(signIn, 'Sign in');
    await check(signIn, 'sign in (1280 px)');
    await signedOut.close();
    console.log('axe-core 4.14.1 violations by impact, per page:');
    for (const [name, tally] of Object.entries(counts)) console.log(`  ${name}: ${JSON.stringify(tally)}`);
    assert.deepEqual(bad, []);
  });

  test("a read_only key's session cannot reschedule, cancel or rotate (the controls are disabled)", async () => {
    const reader = await api.request('POST', '/v1/api-keys', {
      body: { name: 'viewer', permission: 'read_only' },
    });
    assert.equal(reader.status, 201, JSON.stringify(reader.body));
    const scheduled = (await api.request('GET', '/v1/emails?status=scheduled')).body.data[0].id;
    const context = await browser.newContext({ baseURL: api.baseUrl });
    const target = await context.newPage();
    await target.goto('/');
    await target.evaluate((key) => sessionStorage.setItem('postwire.apiKey', key), reader.body.token);
    await target.goto(`/dashboard/emails/${scheduled}`);
    await target.getByText('Read-only key: you can see everything').waitFor();
    for (const name of ['Reschedule', 'Cancel email']) {
      const control = target.getByRole('button', { name });
      await until(() => control.isDisabled(), 5000, `${name} disabled`);
    }
    await target.goto('/dashboard/domains');
    const rotate = target.getByRole('button', { name: 'Rotate DKIM key' }).first();
    await rotate.waitFor();
    await until(() => rotate.isDisabled(), 5000, 'Rotate DKIM key disabled');
    await context.close();
  });

  test('no page error', () => {
    assert.deepEqual(pageErrors, []);
  });
});
