// Debian's chromium through playwright-core, and axe-core run in a page: what the browser suites share. A
// suite skips (with this message) on a machine without the browser.
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';

/**
 * The browser the suites drive: CHROMIUM_PATH, else Debian's chromium-headless-shell (what .ci/run installs),
 * else Debian's chromium. The shell is chromium's headless mode built as a program of its own (the same Blink
 * and V8; what playwright runs headless by default), without the full browser's work a page nobody sees has
 * no use for: a browser suite's process tree took a third less CPU with it (bench/README.md, "CI under 20
 * minutes").
 */
export const CHROMIUM =
  process.env.CHROMIUM_PATH ??
  ['/usr/bin/chromium-headless-shell', '/usr/bin/chromium'].find((file) => existsSync(file)) ??
  '/usr/bin/chromium-headless-shell';
export const BROWSER_SKIP: string | false = existsSync(CHROMIUM)
  ? false
  : `no browser at ${CHROMIUM}: install Debian's chromium-headless-shell (apt-get install -y chromium-headless-shell) or chromium, or set CHROMIUM_PATH`;

const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

/** One headless chromium for a whole suite. */
export const launchBrowser = (): Promise<Browser> =>
  chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu'] });

export interface AxeViolation {
  id: string;
  impact: string;
  where: string;
}

/** axe-core's violations on the page as it is now. */
export async function axeViolations(target: Page): Promise<AxeViolation[]> {
  await target.evaluate(AXE);
  return target.evaluate(async () => {
    const result = await (window as any).axe.run(document, { resultTypes: ['violations'] });
    return result.violations.map((v: any) => ({
      id: v.id as string,
      impact: v.impact as string,
      where: v.nodes.map((node: any) => `${node.target.join(' ')} ${node.failureSummary}`).join('; '),
    }));
  });
}

/** The serious and critical ones, each as `id at where` (an empty list is a pass). */
export const seriousViolations = async (target: Page): Promise<string[]> =>
  (await axeViolations(target))
    .filter((violation) => violation.impact === 'serious' || violation.impact === 'critical')
    .map((violation) => `${violation.id} at ${violation.where}`);

/** What scrolls sideways on the page: the document, or a table's wrapper (an empty list is a pass). */
export const sidewaysScrolls = (target: Page): Promise<string[]> =>
  target.evaluate(() =>
    [document.documentElement, ...document.querySelectorAll('.table-wrap')]
      .filter((element) => element.scrollWidth > element.clientWidth)
      .map(
        (element) =>
          `${element.className || element.tagName}: ${element.scrollWidth} > ${element.clientWidth}`,
      ),
  );

/**
 * A page of the dashboard signed in with `key` through its form (at 1280 × 900, in UTC unless told), its
 * page errors collected in `errors`.
 */
export async function signedInPage(
  browser: Browser,
  { baseUrl, key, errors, width = 1280 }: { baseUrl: string; key: string; errors: string[]; width?: number },
): Promise<Page> {
  const context = await browser.newContext({
    viewport: { width, height: 900 },
    baseURL: baseUrl,
    timezoneId: 'UTC',
  });
  const page = await context.newPage();
  page.on('pageerror', (error) => errors.push(error.message));
  await page.goto('/');
  await page.getByLabel('API key').fill(key);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Overview', level: 1 }).waitFor();
  return page;
}

const SCREENSHOT_DIR = fileURLToPath(new URL('../screenshots/', import.meta.url));

/** With SCREENSHOTS=1, a full-page picture of `target` as test/screenshots/<name>.png; otherwise nothing. */
export async function screenshot(target: Page, name: string): Promise<void> {
  if (process.env.SCREENSHOTS !== '1') return;
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  await target.screenshot({ path: path.join(SCREENSHOT_DIR, `${name}.png`), fullPage: true });
}
