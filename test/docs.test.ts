// `/docs` (Swagger UI) shares its origin with the dashboard, whose API key sits in sessionStorage: it has a
// Content-Security-Policy of its own, nothing may frame it, and Swagger UI runs under it without a single
// violation (in Debian's chromium, when it is there).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Browser } from 'playwright-core';
import { DOCS_CSP } from '../src/modules/dashboard/docs-branding.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { BROWSER_SKIP, launchBrowser } from './helpers/browser.ts';

const skip = BROWSER_SKIP;

/** The directives of a policy, by name. */
const directives = (policy: string) =>
  new Map(
    policy
      .split(';')
      .map((part) => part.trim().split(/\s+/))
      .filter((words) => words[0])
      .map(([name, ...sources]) => [name!, sources]),
  );

describe('the API reference at /docs', () => {
  let api: TestApp;
  before(async () => {
    api = await startTestApp('sqlite');
  });
  after(() => api.close());

  test('the page and every file under it carry the policy: nothing frames it, no inline script, no eval', async () => {
    const policy = directives(DOCS_CSP);
    assert.deepEqual(policy.get('frame-ancestors'), ["'none'"]);
    assert.deepEqual(policy.get('default-src'), ["'none'"]);
    assert.deepEqual(policy.get('script-src'), ["'self'"]);
    assert.deepEqual(policy.get('connect-src'), ["'self'"]);
    assert.deepEqual(policy.get('object-src'), ["'none'"]);
    assert.deepEqual(policy.get('base-uri'), ["'none'"]);
    // Styles from files, and one hash: the style inside Swagger UI's own logo, never 'unsafe-inline'.
    assert.deepEqual(policy.get('style-src')?.[0], "'self'");
    assert.match(policy.get('style-src')?.[1] ?? '', /^'sha256-[A-Za-z0-9+/]{43}='$/);
    assert.equal(policy.get('style-src')?.length, 2);
    assert.doesNotMatch(DOCS_CSP, /unsafe-inline|unsafe-eval|\*/);

    for (const path of [
      '/docs',
      '/docs/',
      '/docs/static/swagger-ui-bundle.js',
      '/docs/static/swagger-initializer.js',
      '/docs/static/swagger-ui.css',
      '/docs/static/theme/postwire.css',
      '/docs/json',
      '/docs/static/index.html',
    ]) {
      const response = await fetch(`${api.baseUrl}${path}`, { redirect: 'manual' });
      assert.ok(response.status === 200 || response.status === 302, `${path}: ${response.status}`);
      assert.equal(response.headers.get('content-security-policy'), DOCS_CSP, path);
      await response.arrayBuffer();
    }
  });

  test(
    'Swagger UI renders and "Try it out" calls the API under the policy, with no violation',
    { skip },
    async () => {
      let browser: Browser | undefined;
      try {
        browser = await launchBrowser();
        const page = await browser.newPage({ baseURL: api.baseUrl, viewport: { width: 1280, height: 900 } });
        const problems: string[] = [];
        page.on('console', (message) => {
          if (message.type() === 'error') problems.push(message.text());
        });
        page.on('pageerror', (error) => problems.push(error.message));
        // Every violation, also those Chromium does not print (the event fires for each).
        await page.addInitScript(() => {
          document.addEventListener('securitypolicyviolation', (event) => {
            console.error(`CSP violation: ${event.violatedDirective} ${event.blockedURI} ${event.sample}`);
          });
        });
        await page.goto('/docs');
        await page.locator('.swagger-ui .info .title', { hasText: 'Postwire API' }).waitFor();
        // Postwire's logo (a data: URL) replaced Swagger's.
        await page.locator('.topbar img[src^="data:image/svg+xml"]').waitFor();

        // Signed in with the key, "Try it out" on the list of webhooks reaches the API (connect-src 'self').
        await page.getByRole('button', { name: 'Authorize' }).first().click();
        await page.locator('.modal-ux input').first().fill(api.key);
        await page.locator('.modal-ux .auth-btn-wrapper button.authorize').click();
        await page.locator('.modal-ux button.btn-done').click();
        const list = page.locator('#operations-Webhooks-listWebhooks');
        await list.locator('.opblock-summary').click();
        await list.getByRole('button', { name: 'Try it out' }).click();
        const answered = page.waitForResponse((response) => response.url().includes('/v1/webhooks'));
        await list.getByRole('button', { name: 'Execute' }).click();
        assert.equal((await answered).status(), 200);
        await list.locator('.live-responses-table .response-col_status', { hasText: '200' }).waitFor();

        // Framed by another origin, the page does not load.
        const framing = await browser.newPage();
        const refused = new Promise<string>((resolve) =>
          framing.on('console', (message) => {
            if (/frame-ancestors/.test(message.text())) resolve(message.text());
          }),
        );
        await framing.setContent(`<iframe src="${api.baseUrl}/docs"></iframe>`);
        const deadline = new Promise<string>((resolve) =>
          setTimeout(resolve, 10_000, 'the frame was not refused within 10 s').unref(),
        );
        assert.match(await Promise.race([refused, deadline]), /frame-ancestors 'none'/);

        assert.deepEqual(problems, []);
      } finally {
        await browser?.close();
      }
    },
  );
});
