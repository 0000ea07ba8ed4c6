// The dashboard's automations (issue 40, item 5), a broadcast's compose page with its preview as a contact and
// its test to one address (issue 37, item 8), and a domain's page with its warm-up and sending health (issue
// 38, items 3–5), in a real browser on both engines: what each page shows, its buttons doing what they say,
// axe-core clean at 1280 and 390 px, and a read_only session in which no control that changes something works.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { DEFAULTS } from '../src/config.ts';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import type { QueueWorker } from '../src/queue/runtime.ts';
import { ENGINES, startTestApp, type TestApp } from './helpers/app.ts';
import { created } from './helpers/answers.ts';
import {
  arrived,
  publishedTemplate,
  startRunWorker,
  subjectsTo,
  welcomeSeries,
} from './helpers/automations.ts';
import {
  BROWSER_SKIP,
  launchBrowser,
  screenshot as pictureOf,
  seriousViolations,
  sidewaysScrolls,
  signedInPage,
} from './helpers/browser.ts';
import { testClock } from './helpers/deliveries.ts';
import { emitOutcomes } from './helpers/outcomes.ts';
import { startSendingWorker } from './helpers/sending.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';
import { until } from './helpers/until.ts';

const PUBLIC_URL = 'https://news.acme.test';
const DAY = 86_400_000;
/** With SCREENSHOTS=1, pictures of what these tests look at go to test/screenshots/automations-*.png. */
const screenshot = (target: Page, name: string) => pictureOf(target, `automations-${name}`);

for (const engine of ENGINES) {
  describe(
    `automations, compose and sending health in the dashboard (${engine})`,
    { skip: BROWSER_SKIP },
    () => {
      let api: TestApp;
      let smtp: TestSmtpServer;
      let sending: SendingWorker;
      let runs: QueueWorker;
      let browser: Browser;
      let page: Page;
      const clock = testClock();
      const pageErrors: string[] = [];
      const seed = {} as {
        welcome: string;
        winback: string;
        ada: string;
        adaRun: string;
        broadcast: string;
        domain: string;
        reader: string;
      };

      const heading = (target: Page, name: string) =>
        target.getByRole('heading', { name, level: 1 }).waitFor();
      const loaded = async (target: Page) => {
        await target.locator('main h1').first().waitFor();
        await target.locator('[aria-busy="true"]').first().waitFor({ state: 'detached' });
      };
      const axeClean = async (target: Page, where: string) =>
        assert.deepEqual(await seriousViolations(target), [], `axe on ${where}`);

      before(async () => {
        api = await startTestApp(engine, {
          clock,
          allowPrivateUrls: true,
          publicUrl: PUBLIC_URL,
          config: {
            reputation: { ...DEFAULTS.reputation, minComplaintVolume: 100, checkIntervalMs: 3_600_000 },
          },
        });
        smtp = await startSmtpServer();
        sending = await startSendingWorker(api, { relayPort: smtp.port, clock, publicUrl: PUBLIC_URL });
        runs = await startRunWorker(api, clock);

        // The welcome series of issue 40: sign-up → welcome → two days → the plan decides which email.
        await created(api, '/v1/contact-properties', { key: 'plan', type: 'string', fallback_value: 'free' });
        const template = (name: string, subject: string) =>
          publishedTemplate(api, { name, subject, html: `<p>${name}</p>`, text: name });
        const welcome = await template('Welcome', 'Welcome, {{ contact.first_name }}!');
        const tips = await template('Pro tips', 'Pro tips');
        const upgrade = await template('Upgrade', 'Upgrade to Pro');
        const from = 'Acme <hello@acme.test>';
        seed.welcome = (
          await created(
            api,
            '/v1/automations',
            welcomeSeries({
              welcome: { template: { id: welcome }, from },
              proTips: { template: { id: tips }, from },
              upgrade: { template: { id: upgrade }, from },
            }),
          )
        ).id;
        seed.winback = (
          await created(api, '/v1/automations', {
            name: 'Winback',
            steps: [
              { key: 'start', type: 'trigger', config: { event_name: 'user.left' } },
              { key: 'ask', type: 'send_email', config: { template: { id: upgrade }, from } },
            ],
            connections: [{ from: 'start', to: 'ask' }],
          })
        ).id;
        const segment = (await created(api, '/v1/segments', { name: 'Readers' })).id;
        const ada = await created(api, '/v1/contacts', {
          email: 'ada@runs.test',
          first_name: 'Ada',
          properties: { plan: 'pro' },
        });
        seed.ada = ada.id;
        await created(api, '/v1/contacts', { email: 'bob@runs.test', first_name: 'Bob' });
        assert.equal((await api.request('POST', `/v1/contacts/${ada.id}/segments/${segment}`)).status, 200);
        for (const email of ['ada@runs.test', 'bob@runs.test']) {
          const sent = await api.request('POST', '/v1/custom-events/send', {
            body: { event: 'user.signed_up', email },
          });
          assert.equal(sent.status, 201, JSON.stringify(sent.body));
        }
        await arrived(smtp, 2);
        clock.advance(2 * DAY + 1000);
        api.services.notifiers.automationRuns.notify();
        await arrived(smtp, 4);
        assert.deepEqual(await subjectsTo(smtp, 'ada@runs.test'), ['Welcome, Ada!', 'Pro tips']);
        const list = await api.request('GET', `/v1/automations/${seed.welcome}/runs?status=completed`);
        seed.adaRun = list.body.data.find((run: any) => run.contact_id === ada.id).id;

        seed.broadcast = (
          await created(api, '/v1/broadcasts', {
            name: 'December news',
            from: 'Acme News <news@acme.test>',
            subject: 'December, {{ contact.first_name | default: "friend" }}',
            html: '<p>Hi {{ contact.first_name }}, on {{ contact.properties.plan }}.</p><a href="{{ unsubscribe_url }}">Leave</a>',
            segment_id: segment,
          })
        ).id;
        seed.domain = (await created(api, '/v1/domains', { name: 'acme.test' })).id;
        seed.reader = (await created(api, '/v1/api-keys', { name: 'reader', permission: 'read_only' })).token;

        browser = await launchBrowser();
        page = await signedInPage(browser, { baseUrl: api.baseUrl, key: api.key, errors: pageErrors });
      });

      after(async () => {
        await browser?.close();
        await runs?.stop();
        await sending?.stop();
        await smtp?.close();
        await api?.close();
      });

      test('the automations: each with its state, trigger and runs by state', async () => {
        await page
          .getByRole('navigation', { name: 'Sections' })
          .getByRole('link', { name: 'Audience' })
          .click();
        await heading(page, 'Contacts');
        await page
          .getByRole('navigation', { name: 'Audience' })
          .getByRole('link', { name: 'Automations' })
          .click();
        await heading(page, 'Automations');
        await loaded(page);
        assert.deepEqual(await page.locator('tr[data-automation="Welcome series"] td').allInnerTexts(), [
          'Welcome series',
          'enabled',
          'user.signed_up',
          '0',
          '0',
          '2',
          '0',
          '0',
          await updatedOf(seed.welcome),
        ]);
        assert.match(
          await page.locator('tr[data-automation="Winback"]').innerText(),
          /Winback\s+disabled\s+user\.left/,
        );
        await axeClean(page, 'the automations');
        await screenshot(page, 'list-1280');
        await page.getByLabel('Status').selectOption('disabled');
        await page.waitForURL(/\?status=disabled$/);
        await page.locator('tr[data-automation="Welcome series"]').waitFor({ state: 'detached' });
        assert.equal(await page.locator('tr[data-automation]').count(), 1);
      });

      async function updatedOf(id: string) {
        const automation = (await api.request('GET', `/v1/automations/${id}`)).body;
        return `${automation.updated_at.replace('T', ' ').replace(/\.\d+Z$/, '')} UTC`;
      }

      test("an automation's graph, its runs, and a run's timeline with why each branch was taken", async () => {
        await page.goto(`/dashboard/automations/${seed.welcome}`);
        await heading(page, 'Welcome series');
        await loaded(page);
        const graph = page.getByTestId('automation-graph');
        // The straight line, then the condition's two branches, each named by when a run takes it.
        assert.deepEqual(
          await graph
            .locator(':scope > li')
            .evaluateAll((items) => items.map((item) => item.getAttribute('data-step'))),
          ['start', 'welcome', 'wait', 'is_pro'],
        );
        assert.match(
          await graph.locator('li[data-step="start"]').innerText(),
          /Starts on the event user\.signed_up/,
        );
        assert.match(await graph.locator('li[data-step="wait"]').innerText(), /Waits 2 days/);
        const branch = (type: string) =>
          graph.locator(`li[data-step="is_pro"] li[data-branch="${type}"]`).innerText();
        assert.match(
          await branch('condition_met'),
          new RegExp(
            `^If the condition is met:\\s+pro_tips \\(send_email\\): Sends template ${await templateOf('pro_tips')} from Acme <hello@acme\\.test>\\s+The run ends here\\.$`,
          ),
        );
        assert.match(
          await branch('condition_not_met'),
          new RegExp(
            `^If the condition is not met:\\s+upgrade \\(send_email\\): Sends template ${await templateOf('upgrade')} from Acme <hello@acme\\.test>\\s+The run ends here\\.$`,
          ),
        );
        assert.match(
          await graph.locator('li[data-step="is_pro"]').innerText(),
          /Checks whether contact\.properties\.plan is "pro"/,
        );
        const counts = await page
          .getByTestId('automation-runs')
          .locator('[data-stat]')
          .evaluateAll((stats) =>
            stats.map(
              (stat) => `${stat.getAttribute('data-stat')} ${stat.querySelector('.stat-value')!.textContent}`,
            ),
          );
        assert.deepEqual(counts, ['running 0', 'waiting 0', 'completed 2', 'cancelled 0', 'failed 0']);
        // Each run by its contact's address, linking to the contact, as the run's own page shows it.
        assert.deepEqual((await page.locator('tr[data-run] td:nth-child(2)').allInnerTexts()).sort(), [
          'ada@runs.test',
          'bob@runs.test',
        ]);
        assert.equal(
          await page
            .locator(`tr[data-run="${seed.adaRun}"]`)
            .getByRole('link', { name: 'ada@runs.test', exact: true })
            .getAttribute('href'),
          `/dashboard/contacts/${seed.ada}`,
        );
        await axeClean(page, "an automation's page");
        await screenshot(page, 'automation-1280');

        await page.locator(`tr[data-run="${seed.adaRun}"]`).getByRole('link', { name: seed.adaRun }).click();
        await heading(page, 'Run for ada@runs.test');
        await loaded(page);
        const timeline = page.getByTestId('run-timeline');
        const steps = await timeline
          .locator('li')
          .evaluateAll((items) =>
            items.map((item) => [
              item.getAttribute('data-step'),
              item.getAttribute('data-status'),
              item.querySelector('.run-outcome')!.textContent!.replace(/\s+/g, ' ').trim(),
            ]),
          );
        const run = (await api.request('GET', `/v1/automations/${seed.welcome}/runs/${seed.adaRun}`)).body;
        const welcomeEmail = run.steps[1].output.email_id;
        const tipsEmail = run.steps[4].output.email_id;
        const until = `${run.steps[2].output.until.replace('T', ' ').replace(/\.\d+Z$/, '')} UTC`;
        assert.deepEqual(steps, [
          ['start', 'completed', `Started by the event user.signed_up (${run.steps[0].output.send_id}).`],
          ['welcome', 'completed', `Sent “Welcome, Ada!” to ada@runs.test: ${welcomeEmail}.`],
          ['wait', 'completed', `Waited until ${until}.`],
          [
            'is_pro',
            'completed',
            'Met (read contact.properties.plan = "pro"): took the “if the condition is met” branch.',
          ],
          ['pro_tips', 'completed', `Sent “Pro tips” to ada@runs.test: ${tipsEmail}.`],
        ]);
        await axeClean(page, "a run's timeline");
        await screenshot(page, 'run-1280');
        // Each email the run sent is a link to its page.
        await timeline.getByRole('link', { name: welcomeEmail }).click();
        await heading(page, 'Welcome, Ada!');
      });

      async function templateOf(step: string) {
        const automation = (await api.request('GET', `/v1/automations/${seed.welcome}`)).body;
        return automation.steps.find((each: any) => each.key === step).config.template.id;
      }

      test('enable, then stop after confirming', async () => {
        await page.goto(`/dashboard/automations/${seed.winback}`);
        await heading(page, 'Winback');
        await page.getByRole('button', { name: 'Enable' }).click();
        await page.getByText('Enabled: its trigger starts runs.').waitFor();
        assert.equal((await api.request('GET', `/v1/automations/${seed.winback}`)).body.status, 'enabled');
        await page.getByRole('button', { name: 'Stop automation' }).click();
        await page.getByRole('dialog').getByRole('button', { name: 'Stop automation' }).click();
        await page.getByText('Stopped: disabled, its live runs cancelled.').waitFor();
        assert.equal((await api.request('GET', `/v1/automations/${seed.winback}`)).body.status, 'disabled');
        await page.getByRole('button', { name: 'Enable' }).waitFor();
        await axeClean(page, 'a stopped automation');
      });

      test('compose: the preview as a chosen contact, a test to one address, refusals next to their field', async () => {
        await page.goto(`/dashboard/broadcasts/${seed.broadcast}`);
        await heading(page, 'December news');
        await loaded(page);
        await page
          .frameLocator('iframe[title="The broadcast\'s html"]')
          .getByText('Hi {{ contact.first_name }}, on')
          .waitFor();
        const card = page.getByTestId('broadcast-preview');
        await card.getByLabel('Contact (address or id)').fill('nobody@runs.test');
        await card.getByRole('button', { name: 'Preview' }).click();
        assert.equal(
          await card.locator('[data-param="contact"]').innerText(),
          "No contact 'nobody@runs.test'.",
        );
        await card.getByLabel('Contact (address or id)').fill('ada@runs.test');
        await card.getByRole('button', { name: 'Preview' }).click();
        const fields = card.getByTestId('preview-fields');
        await fields.waitFor();
        assert.match(
          await fields.innerText(),
          /From\s+Acme News <news@acme\.test>\s+To\s+ada@runs\.test\s+Subject\s+December, Ada/,
        );
        const frame = page.frameLocator('iframe[title="The copy for ada@runs.test"]');
        await frame.getByText('Hi Ada, on pro.').waitFor();
        // The draft's html as written is still there beside it.
        await page
          .frameLocator('iframe[title="The broadcast\'s html"]')
          .getByText('Hi {{ contact.first_name }}, on')
          .waitFor();
        await axeClean(page, 'a preview');
        await screenshot(page, 'compose-preview-1280');

        await card.getByLabel('Test address').fill('not an address');
        await card.getByRole('button', { name: 'Send test' }).click();
        assert.match(await card.locator('[data-param="to"]').innerText(), /^to /);
        await card.getByLabel('Test address').fill('me@team.test');
        await card.getByRole('button', { name: 'Send test' }).click();
        const notice = card.getByText(/^Test sent to me@team\.test: msg_/);
        await notice.waitFor();
        await until(() => smtp.messages.some((each) => each.to.includes('me@team.test')), 30_000, 'the test');
        assert.deepEqual(await subjectsTo(smtp, 'me@team.test'), ['[Test] December, Ada']);
        const broadcast = (await api.request('GET', `/v1/broadcasts/${seed.broadcast}`)).body;
        assert.equal(broadcast.status, 'draft');
        assert.equal(broadcast.counts.copies, 0);
        await axeClean(page, 'a test sent');
      });

      test("a domain's page: warm-up state and its switch, the breaker's state with Resume, the compliance checks", async () => {
        await page.goto('/dashboard/domains');
        await loaded(page);
        await page.getByRole('link', { name: 'acme.test', exact: true }).click();
        await heading(page, 'acme.test');
        await loaded(page);
        const warmup = page.getByTestId('warmup');
        assert.match(
          await warmup.getByTestId('warmup-state').innerText(),
          /^off Off: mail from acme\.test is not held/,
        );
        await warmup.getByRole('button', { name: 'Turn warm-up on' }).click();
        await warmup.getByRole('button', { name: 'Turn warm-up off' }).waitFor();
        const state = (await api.request('GET', `/v1/domains/${seed.domain}/warmup`)).body;
        assert.equal(state.enabled, true);
        assert.match(
          await warmup.getByTestId('warmup-state').innerText(),
          new RegExp(
            `^in progress Day 1 of ${state.schedule.length}: today each large provider takes ${state.allowance_per_destination} messages from acme\\.test`,
          ),
        );
        assert.match(await warmup.innerText(), /Nothing sent from it to a large provider today/);
        assert.equal(await page.getByTestId('compliance').count(), 1);
        const health = page.getByTestId('sending-health');
        // The automation's and the test's emails went from it: too few to judge.
        assert.match(
          await health.locator('li[data-scope="acme.test"]').innerText(),
          /^acme\.test ok: hard bounces — \(limit 5\.0\s%\), complaints — \(limit 0\.30\s%\) over the last 7 days\. \(5 sent, 0 hard bounces, 0 complaints\)$/,
        );
        await axeClean(page, "a domain's page");

        // 100 more sent from acme.test and one complaint (about 1 %, past the 0.3 % limit): the domain pauses;
        // the project (1 in 905) only warns.
        await outcomes('acme.test', 'email.sent', 100);
        await outcomes('acme.test', 'email.complained', 1);
        await outcomes('other.test', 'email.sent', 800);
        await api.services.reputation.evaluate();
        await page.reload();
        await heading(page, 'acme.test');
        const paused = health.locator('li[data-scope="acme.test"]');
        await paused.waitFor();
        assert.match(
          await paused.innerText(),
          /^acme\.test paused: hard bounces — \(limit 5\.0\s%\), complaints 0\.95\s% \(limit 0\.30\s%\) over the last 7 days\. Its broadcasts are refused; transactional mail still goes\. \(105 sent, 0 hard bounces, 1 complaint; paused since /,
        );
        assert.match(await health.locator('li[data-scope="project"]').innerText(), /^This project warning/);
        await axeClean(page, 'a paused domain');
        await screenshot(page, 'domain-1280');

        // A read_only session sees it all and can change nothing: every such control is disabled, and one
        // forced into working is refused by the server, in words.
        const reader = await signedInPage(browser, {
          baseUrl: api.baseUrl,
          key: seed.reader,
          errors: pageErrors,
        });
        const controls = async (url: string, names: string[]) => {
          await reader.goto(url);
          await loaded(reader);
          await reader.locator('[data-read-only-banner]').waitFor();
          for (const name of names) {
            const button = reader.getByRole('button', { name, exact: true });
            await button.waitFor();
            assert.equal(await button.isDisabled(), true, `${name} on ${url}`);
          }
          await axeClean(reader, `${url} (read_only)`);
        };
        await controls(`/dashboard/domains/${seed.domain}`, [
          'Resume sending from acme.test',
          'Turn warm-up off',
          'Start over',
          'Verify',
          'Rotate DKIM key',
          'Delete',
        ]);
        await controls(`/dashboard/automations/${seed.welcome}`, ['Stop automation']);
        await controls(`/dashboard/automations/${seed.winback}`, ['Enable']);
        await controls(`/dashboard/broadcasts/${seed.broadcast}`, [
          'Send test',
          'Send now',
          'Schedule',
          'Cancel broadcast',
          'Delete',
          'Duplicate',
        ]);
        // Reading works: the preview is a read.
        const card = reader.getByTestId('broadcast-preview');
        await card.getByLabel('Contact (address or id)').fill('ada@runs.test');
        await card.getByRole('button', { name: 'Preview' }).click();
        await card.getByTestId('preview-fields').waitFor();
        // Forced: the server refuses, and the page says why.
        await reader.goto(`/dashboard/automations/${seed.welcome}`);
        await loaded(reader);
        const stop = reader.getByRole('button', { name: 'Stop automation' });
        await stop.evaluate((button) => {
          (button as HTMLButtonElement).removeAttribute('data-writes');
          (button as HTMLButtonElement).disabled = false;
        });
        await stop.click();
        await reader.getByRole('dialog').getByRole('button', { name: 'Stop automation' }).click();
        await reader
          .getByRole('alert')
          .getByText('This route needs a full_access key; this key is read_only.')
          .waitFor();
        assert.equal((await api.request('GET', `/v1/automations/${seed.welcome}`)).body.status, 'enabled');
        await reader.context().close();

        // The full_access key resumes the domain from its page.
        await page.getByRole('button', { name: 'Resume sending from acme.test' }).click();
        await page.getByText('Resumed: mail from acme.test goes again.').waitFor();
        const view = (await api.request('GET', '/v1/reputation')).body;
        assert.equal(view.domains.find((scope: any) => scope.domain === 'acme.test').state, 'ok');
      });

      /** Outcomes as the workers emit them: `n` events of `kind` for mail from `domain`. */
      const outcomes = (domain: string, kind: 'email.sent' | 'email.complained', n: number) =>
        emitOutcomes(api, api.projectId, domain, kind, n);

      test('the new pages fit 390 px, axe-clean', async () => {
        const context = await browser.newContext({
          viewport: { width: 390, height: 844 },
          baseURL: api.baseUrl,
        });
        const phone = await context.newPage();
        phone.on('pageerror', (error) => pageErrors.push(error.message));
        await phone.goto('/');
        await phone.evaluate((key) => sessionStorage.setItem('postwire.apiKey', key), api.key);
        for (const url of [
          '/dashboard/automations',
          `/dashboard/automations/${seed.welcome}`,
          `/dashboard/automations/${seed.welcome}/runs/${seed.adaRun}`,
          `/dashboard/domains/${seed.domain}`,
          `/dashboard/broadcasts/${seed.broadcast}`,
        ]) {
          await phone.goto(url);
          await loaded(phone);
          assert.deepEqual(await sidewaysScrolls(phone), [], `${url} at 390 px`);
          await axeClean(phone, `${url} at 390 px`);
        }
        await screenshot(phone, 'run-390');
        await context.close();
      });

      test('no page error', () => {
        assert.deepEqual(pageErrors, []);
      });
    },
  );
}
