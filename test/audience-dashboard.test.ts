// The audience side in a browser (issue 37, items 3 and 8): the dashboard's broadcasts (list, compose,
// schedule, cancel, a sent one's results), contacts (search, a contact's page, a CSV import's progress),
// segments and topics; and the public preference page a contact's link opens. axe-core finds no serious or
// critical violation on any of them. One app, one browser, one signed-in page for every case (the browser
// suites are what the CI's time goes to); Debian's chromium as in test/dashboard.test.ts.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import type { Clock } from '../src/lib/clock.ts';
import { createSecretBox } from '../src/lib/crypto.ts';
import { createContactImportWorker } from '../src/modules/contacts/contact-imports.worker.ts';
import { createPreferenceTokens } from '../src/modules/engagement/tokens.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import type { QueueWorker } from '../src/queue/runtime.ts';
import { startTestApp, TEST_ENCRYPTION_KEY, type TestApp } from './helpers/app.ts';
import { created } from './helpers/answers.ts';
import {
  BROWSER_SKIP,
  launchBrowser,
  screenshot as pictureOf,
  seriousViolations,
  sidewaysScrolls,
  signedInPage,
} from './helpers/browser.ts';
import { BROWSER, onServer, parseMail } from './helpers/engagement.ts';
import { startFanOutWorker } from './helpers/fan-out.ts';
import { startSendingWorker } from './helpers/sending.ts';
import { until } from './helpers/until.ts';

const PUBLIC_URL = 'https://news.acme.example';
/** With SCREENSHOTS=1, pictures of what these tests look at go to test/screenshots/audience-*.png. */
const screenshot = (target: Page, name: string) => pictureOf(target, `audience-${name}`);

describe('the audience in the dashboard, and the preference page', { skip: BROWSER_SKIP }, () => {
  let api: TestApp;
  let sender: SendingWorker;
  let fanOut: QueueWorker;
  let imports: QueueWorker;
  let browser: Browser;
  let page: Page;
  /** Moved on before a click, so it counts as a person's (a click within 2 s of delivery is a machine's). */
  let offset = 0;
  const clock: Clock = { now: () => new Date(Date.now() + offset) };
  const pageErrors: string[] = [];
  const seed = {} as { segment: string; topic: string; ada: string; broadcast: string };

  const heading = (target: Page, name: string) => target.getByRole('heading', { name, level: 1 }).waitFor();
  const loaded = async (target: Page) => {
    await target.locator('main h1').first().waitFor();
    await target.locator('[aria-busy="true"]').first().waitFor({ state: 'detached' });
  };
  const axeClean = async (target: Page, where: string) =>
    assert.deepEqual(await seriousViolations(target), [], `axe on ${where}`);

  before(async () => {
    api = await startTestApp('sqlite', { allowPrivateUrls: true, publicUrl: PUBLIC_URL, clock });
    sender = await startSendingWorker(api, { clock, publicUrl: PUBLIC_URL });
    fanOut = await startFanOutWorker(api, { clock });
    imports = createContactImportWorker({
      database: api.database.handle,
      clock,
      job: api.services.importJob,
      notifier: api.services.notifiers.contactImports,
    });
    await imports.start();

    // A segment of three readers (one unsubscribed), a topic, and a broadcast sent to them with a link.
    seed.segment = (await created(api, '/v1/segments', { name: 'Readers' })).id;
    seed.topic = (
      await created(api, '/v1/topics', {
        name: 'Product news',
        description: 'What shipped, once a month.',
        default_subscription: 'opt_in',
      })
    ).id;
    for (const body of [
      { email: 'ada@readers.example', first_name: 'Ada', last_name: 'Lovelace' },
      { email: 'bob@readers.example', first_name: 'Bob' },
      { email: 'carol@readers.example', unsubscribed: true },
    ]) {
      const contact = await created(api, '/v1/contacts', body);
      if (body.first_name === 'Ada') seed.ada = contact.id;
      const added = await api.request('POST', `/v1/contacts/${contact.id}/segments/${seed.segment}`);
      assert.equal(added.status, 200);
    }
    const broadcast = await created(api, '/v1/broadcasts', {
      name: 'November news',
      from: 'Acme News <news@acme.example>',
      subject: 'What shipped in November, {{ contact.first_name }}',
      html: '<html><body><h1>November</h1><p>Hi {{ contact.first_name }} — three things shipped.</p><a href="https://acme.example/blog/november">Read the post</a><p><a href="{{ preferences_url }}">Preferences</a></p></body></html>',
      segment_id: seed.segment,
      topic_id: seed.topic,
      tracking: { clicks: true, opens: true },
      send: true,
    });
    seed.broadcast = broadcast.id;
    await until(
      async () => (await api.request('GET', `/v1/broadcasts/${broadcast.id}`)).body.counts.delivered === 2,
      20_000,
      'both copies delivered',
    );
    // Ada clicks the post's link twice (one unique click), a minute on.
    const recipients = await api.request('GET', `/v1/broadcasts/${broadcast.id}/recipients`);
    const copy = recipients.body.data.find((row: any) => row.email === 'ada@readers.example').email_id;
    const raw = await api.request('GET', `/v1/emails/${copy}/raw`);
    assert.equal(raw.status, 200);
    const mail = await parseMail(raw.body.raw);
    const click = /href="([^"]+\/c\/[0-9a-z]+)"/.exec(mail.html)?.[1];
    assert.ok(click, `no click link in: ${mail.html}`);
    offset = 60_000;
    for (let time = 0; time < 2; time++) {
      const response: Response = await fetch(onServer(click, api.baseUrl), {
        headers: { 'user-agent': BROWSER },
        redirect: 'manual',
      });
      assert.equal(response.status, 302);
    }

    browser = await launchBrowser();
    page = await signedInPage(browser, { baseUrl: api.baseUrl, key: api.key, errors: pageErrors });
  });

  after(async () => {
    await browser?.close();
    await fanOut?.stop();
    await imports?.stop();
    await sender?.stop();
    await api?.close();
  });

  test("a sent broadcast's results: its counts, the links clicked, the recipients by what happened", async () => {
    await page.getByRole('navigation', { name: 'Sections' }).getByRole('link', { name: 'Audience' }).click();
    await heading(page, 'Contacts');
    await page
      .getByRole('navigation', { name: 'Audience' })
      .getByRole('link', { name: 'Broadcasts' })
      .click();
    await heading(page, 'Broadcasts');
    await loaded(page);
    const row = page.locator(`tr[data-broadcast="${seed.broadcast}"]`);
    assert.match(await row.innerText(), /November news\s+sent\s+What shipped in November/);
    await axeClean(page, 'the broadcasts');
    await row.getByRole('link', { name: 'November news' }).click();
    await heading(page, 'November news');
    await page.getByRole('heading', { name: 'Results' }).waitFor();
    const counts = Object.fromEntries(
      await page
        .getByTestId('broadcast-counts')
        .locator('[data-stat]')
        .evaluateAll((stats) =>
          stats.map((stat) => [
            stat.getAttribute('data-stat'),
            Number(stat.querySelector('.stat-value')!.textContent),
          ]),
        ),
    );
    assert.deepEqual(
      { ...counts },
      {
        copies: 2,
        excluded: 1,
        queued: 0,
        sent: 2,
        delivered: 2,
        opened: 0,
        clicked: 1,
        bounced: 0,
        complained: 0,
        unsubscribed: 0,
        failed: 0,
      },
    );
    const link = page.locator('tr[data-link="https://acme.example/blog/november"]');
    assert.deepEqual(await link.locator('td').allInnerTexts(), [
      'https://acme.example/blog/november',
      '2',
      '1',
    ]);
    // Recipients, then only those who clicked.
    await page.locator('tr[data-recipient="bob@readers.example"]').waitFor();
    await page.getByLabel('What happened').selectOption('clicked');
    await page.waitForURL(/\?status=clicked$/);
    await page.locator('tr[data-recipient="bob@readers.example"]').waitFor({ state: 'detached' });
    assert.equal(await page.locator('tr[data-recipient]').count(), 1);
    assert.match(await page.locator('tr[data-recipient="ada@readers.example"]').innerText(), /delivered/);
    // The one left out, and why.
    assert.match(
      await page.getByRole('heading', { name: 'Excluded contacts' }).locator('..').innerText(),
      /carol@readers\.example\s+unsubscribed/,
    );
    await axeClean(page, "a broadcast's results");
    await screenshot(page, 'broadcast-results-1280');
  });

  test('compose a draft, schedule it, cancel it; a refused field says why next to it', async () => {
    await page.goto('/dashboard/broadcasts');
    await loaded(page);
    await page.getByRole('button', { name: 'New broadcast' }).click();
    await page.getByLabel('Name (for you)').fill('December news');
    await page.getByLabel('From').fill('not an address');
    await page.getByLabel('Subject').fill('December ✨');
    await page.getByLabel('Segment').selectOption(seed.segment);
    await page.getByLabel('Html').fill('<p>Hi {{ contact.first_name }}</p>');
    await axeClean(page, 'the compose form');
    await screenshot(page, 'broadcast-compose-1280');
    await page.getByRole('button', { name: 'Save draft' }).click();
    assert.match(await page.locator('[data-param="from"]').innerText(), /not an address|from/i);
    await page.getByLabel('From').fill('Acme News <news@acme.example>');
    await page.getByRole('button', { name: 'Save draft' }).click();
    await heading(page, 'December news');
    await page.getByText('draft', { exact: true }).waitFor();
    const id = page.url().split('/').pop()!;
    const at = new Date(Date.now() + 2 * 86_400_000).toISOString().slice(0, 16);
    await page.getByLabel('or at').fill(at);
    await page.getByRole('button', { name: 'Schedule' }).click();
    await page.getByText(`Scheduled for ${at.slice(0, 10)} ${at.slice(11)}:00 UTC.`).waitFor();
    assert.equal((await api.request('GET', `/v1/broadcasts/${id}`)).body.status, 'scheduled');
    await axeClean(page, 'a scheduled broadcast');
    await page.getByRole('button', { name: 'Cancel broadcast' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Cancel broadcast' }).click();
    await page.getByText('Canceled: it will not be sent.').waitFor();
    assert.equal((await api.request('GET', `/v1/broadcasts/${id}`)).body.status, 'canceled');
  });

  test("contacts: search by address, a contact's page with its topics (changed there), segments and email", async () => {
    await page.getByRole('navigation', { name: 'Sections' }).getByRole('link', { name: 'Audience' }).click();
    await heading(page, 'Contacts');
    await loaded(page);
    assert.equal(await page.locator('tr[data-contact]').count(), 3);
    await page.getByLabel('Address starts with').fill('ad');
    await page.getByLabel('Address starts with').press('Enter');
    await page.waitForURL(/email_prefix=ad/);
    await page.locator('tr[data-contact="bob@readers.example"]').waitFor({ state: 'detached' });
    assert.equal(await page.locator('tr[data-contact]').count(), 1);
    await axeClean(page, 'the contacts');
    await page.getByRole('link', { name: 'ada@readers.example' }).click();
    await heading(page, 'ada@readers.example');
    await loaded(page);
    const topic = page.locator('tr[data-topic="Product news"]');
    assert.match(await topic.innerText(), /subscribed \(the default\)/);
    await topic.getByRole('button', { name: 'Unsubscribe from Product news' }).click();
    await page.getByText('Unsubscribed from Product news.').waitFor();
    await topic.getByRole('button', { name: 'Subscribe to Product news' }).waitFor();
    const topics = await api.request('GET', `/v1/contacts/${seed.ada}/topics`);
    assert.equal(topics.body.data[0].subscription, 'opt_out');
    await page.locator('tr[data-segment="Readers"]').waitFor();
    // Into another segment from here, and the broadcast it got.
    await created(api, '/v1/segments', { name: 'Early readers' });
    await page.reload();
    await page.getByLabel('Add to').selectOption({ label: 'Early readers' });
    await page.getByRole('button', { name: 'Add', exact: true }).click();
    await page.locator('tr[data-segment="Early readers"]').waitFor();
    await page.getByRole('link', { name: 'What shipped in November, Ada' }).waitFor();
    await axeClean(page, "a contact's page");
    await screenshot(page, 'contact-1280');
  });

  test('import a CSV: its progress, its numbers, the rows it could not take', async () => {
    await page.goto('/dashboard/contacts');
    await loaded(page);
    const csv =
      'email,first_name\nnew.reader@readers.example,Zoë\nnot-an-address,X\nada@readers.example,Ada\n';
    await page.getByLabel(/CSV file/).setInputFiles({
      name: 'readers.csv',
      mimeType: 'text/csv',
      buffer: Buffer.from(csv),
    });
    await page.getByRole('button', { name: 'Import' }).click();
    const progress = page.getByTestId('import-progress');
    await progress.getByText('completed').waitFor({ timeout: 20_000 });
    assert.match(await progress.innerText(), /3 of 3 rows read/);
    assert.match(await progress.innerText(), /1 created · 1 updated · 0 skipped · 1 failed/);
    await progress.getByText('Rows not imported').click();
    assert.match(await progress.innerText(), /Row 2: /);
    await page.locator('tr[data-contact="new.reader@readers.example"]').waitFor();
    await axeClean(page, 'an import done');
    await screenshot(page, 'contacts-import-1280');
  });

  test('segments and topics: listed, added, deleted', async () => {
    await page.goto('/dashboard/contacts');
    await page.getByRole('navigation', { name: 'Audience' }).getByRole('link', { name: 'Topics' }).click();
    await heading(page, 'Topics');
    await loaded(page);
    assert.match(
      await page.locator('tr[data-topic="Product news"]').innerText(),
      /What shipped, once a month\.\s+opt in/,
    );
    await page.getByLabel('Name').fill('Offers');
    await page.getByLabel('A contact that has not chosen').selectOption('opt_out');
    await page.getByRole('button', { name: 'Add topic' }).click();
    await page.locator('tr[data-topic="Offers"]').waitFor();
    await axeClean(page, 'the topics');
    await screenshot(page, 'topics-1280');
    await page.getByRole('navigation', { name: 'Audience' }).getByRole('link', { name: 'Segments' }).click();
    await heading(page, 'Segments');
    await loaded(page);
    await page.getByLabel('Name').fill('VIP');
    await page.getByRole('button', { name: 'Add segment' }).click();
    const vip = page.locator('tr[data-segment="VIP"]');
    await vip.waitFor();
    await vip.getByRole('button', { name: 'Delete VIP' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Delete' }).click();
    await vip.waitFor({ state: 'detached' });
    assert.equal(await page.locator('tr[data-segment="Readers"]').count(), 1);
    await axeClean(page, 'the segments');
  });

  test('the preference page: from the keyboard, each change at once; axe-clean at 1280 and 390 px', async () => {
    const token = createPreferenceTokens(createSecretBox(TEST_ENCRYPTION_KEY)).make(seed.ada, clock.now());
    const link = `${api.baseUrl}/p/${token}`;
    for (const width of [1280, 390]) {
      const context = await browser.newContext({ viewport: { width, height: 844 } });
      const person = await context.newPage();
      person.on('pageerror', (error) => pageErrors.push(error.message));
      await person.goto(link);
      await heading(person, 'Your email preferences');
      assert.deepEqual(await sidewaysScrolls(person), [], `${width} px`);
      await axeClean(person, `the preference page (${width} px)`);
      await screenshot(person, `preferences-${width}`);
      await context.close();
    }
    const context = await browser.newContext({ viewport: { width: 1280, height: 844 } });
    const person = await context.newPage();
    await person.goto(link);
    // Ada opted out of Product news on the dashboard: the box is empty. Tick it and save, by keyboard.
    const box = person.getByRole('checkbox', { name: 'Product news' });
    assert.equal(await box.isChecked(), false);
    await box.focus();
    await person.keyboard.press('Space');
    await person.keyboard.press('Tab');
    await person.keyboard.press('Enter');
    await person.getByRole('status').getByText('Your choices are saved.').waitFor();
    assert.equal(await person.getByRole('checkbox', { name: 'Product news' }).isChecked(), true);
    const topics = await api.request('GET', `/v1/contacts/${seed.ada}/topics`);
    assert.equal(topics.body.data.find((row: any) => row.name === 'Product news').subscription, 'opt_in');
    await axeClean(person, 'the preference page, saved');
    await person.getByRole('button', { name: 'Unsubscribe from all' }).click();
    await person.getByRole('status').getByText('You are unsubscribed from all of these emails.').waitFor();
    assert.equal((await api.request('GET', `/v1/contacts/${seed.ada}`)).body.unsubscribed, true);
    await person.getByRole('button', { name: 'Subscribe again' }).click();
    await person.getByRole('status').getByText('You are subscribed again').waitFor();
    assert.equal((await api.request('GET', `/v1/contacts/${seed.ada}`)).body.unsubscribed, false);
    // A forged link: a page that says so.
    const forged = await person.goto(`${api.baseUrl}/p/${token.slice(0, -2)}zz`);
    assert.equal(forged?.status(), 404);
    await heading(person, 'Link not found');
    await axeClean(person, 'a forged link');
    await context.close();
  });

  test('with Audience the menu is one line at 1280 px; the new pages fit 390 px', async () => {
    await page.goto('/dashboard/contacts');
    await loaded(page);
    const tops = await page
      .getByRole('navigation', { name: 'Sections' })
      .getByRole('link')
      .evaluateAll((links) => links.map((link) => `${link.textContent}: ${(link as HTMLElement).offsetTop}`));
    assert.equal(tops.length, 12, tops.join(', '));
    assert.equal(new Set(tops.map((top) => top.split(': ')[1])).size, 1, tops.join(', '));
    const context = await browser.newContext({ viewport: { width: 390, height: 844 }, baseURL: api.baseUrl });
    const phone = await context.newPage();
    phone.on('pageerror', (error) => pageErrors.push(error.message));
    await phone.goto('/');
    await phone.evaluate((key) => sessionStorage.setItem('postwire.apiKey', key), api.key);
    for (const url of [
      '/dashboard/broadcasts',
      `/dashboard/broadcasts/${seed.broadcast}`,
      '/dashboard/contacts',
      `/dashboard/contacts/${seed.ada}`,
      '/dashboard/segments',
      '/dashboard/topics',
    ]) {
      await phone.goto(url);
      await loaded(phone);
      assert.deepEqual(await sidewaysScrolls(phone), [], `${url} at 390 px`);
      await axeClean(phone, `${url} at 390 px`);
      await screenshot(phone, `${url.split('/')[2]}${url.split('/')[3] ? '-page' : ''}-390`);
    }
    await context.close();
  });

  test('no page error', () => {
    assert.deepEqual(pageErrors, []);
  });
});
