import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { createSecretBox } from '../src/lib/crypto.ts';
import { newId } from '../src/lib/ids.ts';
import { AUTOMATED_WITHIN_MS, isAutomated } from '../src/modules/engagement/automation.ts';
import { isOneClickBody } from '../src/modules/engagement/engagement.routes.ts';
import {
  addOpenPixel,
  MAX_TRACKED_LINKS,
  rewriteLinks,
  trackedLinks,
} from '../src/modules/emails/tracked-html.ts';
import { createEngagementTokens } from '../src/modules/engagement/tokens.ts';
import { TEST_ENCRYPTION_KEY } from './helpers/app.ts';

// The pure parts of engagement, case by case: what counts as a machine, what a token accepts, which links
// are tracked. The suites in engagement.test.ts drive the same code over real SMTP and HTTP.

describe('automated fetches', () => {
  const at = new Date('2026-11-23T12:00:10.000Z');
  const human = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36';
  const check = (userAgent: string | undefined, extra: { purpose?: string; deliveredAt?: string } = {}) =>
    isAutomated({ userAgent, purpose: extra.purpose, at, deliveredAt: extra.deliveredAt ?? null });

  test('people: browsers, mail apps, the Gmail and Yahoo image proxies', () => {
    for (const agent of [
      human,
      'Mozilla/5.0 (Windows NT 5.1; rv:11.0) Gecko Firefox/11.0 (via ggpht.com GoogleImageProxy)',
      'YahooMailProxy; https://help.yahoo.com/kb/yahoo-mail-proxy-SLN28749.html',
      'Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148',
    ])
      assert.equal(check(agent), false, agent);
  });

  test('machines: Apple MPP, scanners, libraries, no agent, prefetch, too soon after delivery', () => {
    for (const agent of [
      'Mozilla/5.0',
      undefined,
      '',
      'curl/8.5.0',
      'python-requests/2.32',
      'Go-http-client/1.1',
      'Mozilla/5.0 (compatible; Googlebot/2.1)',
      'Mozilla/5.0 (X11; Linux x86_64) HeadlessChrome/120.0',
      'Barracuda Sentinel (EE)',
      'Mozilla/5.0 (compatible; Proofpoint URL Defense)',
      'Microsoft Office/16.0 (Windows NT 10.0; Microsoft Outlook 16.0)',
    ])
      assert.equal(check(agent), true, String(agent));
    assert.equal(check(human, { purpose: 'prefetch' }), true);
    const justDelivered = new Date(at.getTime() - AUTOMATED_WITHIN_MS + 500).toISOString();
    assert.equal(check(human, { deliveredAt: justDelivered }), true);
    const aMinuteAgo = new Date(at.getTime() - 60_000).toISOString();
    assert.equal(check(human, { deliveredAt: aMinuteAgo }), false);
  });
});

describe('engagement tokens', () => {
  const tokens = createEngagementTokens(createSecretBox(TEST_ENCRYPTION_KEY));
  const other = createEngagementTokens(createSecretBox(Buffer.alloc(32, 9)));
  const recipient = newId('rcpt');

  test('each kind reads back its own token only', () => {
    const open = tokens.make('open', recipient);
    const click = tokens.make('click', recipient, 1000);
    const unsubscribe = tokens.make('unsubscribe', recipient);
    assert.deepEqual(tokens.read('open', open), { recipientId: recipient, index: 0 });
    assert.deepEqual(tokens.read('click', click), { recipientId: recipient, index: 1000 });
    assert.deepEqual(tokens.read('unsubscribe', unsubscribe), { recipientId: recipient, index: 0 });
    assert.equal(tokens.read('unsubscribe', open), undefined, 'an open token is not an unsubscribe token');
    assert.equal(tokens.read('click', open), undefined);
    assert.equal(other.read('open', open), undefined, 'another server key');
    assert.notEqual(open, unsubscribe);
  });

  test('altered, truncated, other-index and garbage tokens do not verify', () => {
    const click = tokens.make('click', recipient, 3);
    const swapped = `${click.slice(0, 26)}05${click.slice(28)}`; // another link's index, same tag
    for (const bad of [
      swapped,
      click.slice(0, -1),
      `${click}0`,
      click.toUpperCase(),
      click.replace(/.$/, (last) => (last === '0' ? '1' : '0')),
      '',
      'x'.repeat(44),
      '../../../../etc/passwd',
    ])
      assert.equal(tokens.read('click', bad), undefined, bad);
    assert.equal(MAX_TRACKED_LINKS, 1024);
  });
});

describe('tracked links', () => {
  const html = [
    '<a href="https://a.test/x?y=1&amp;z=2">1</a>',
    "<a class='b' href='http://b.test/'>2</a>",
    '<a href=https://c.test/unquoted>3</a>',
    '<A HREF="HTTPS://D.TEST/">4</A>',
    '<a href="mailto:x@y.test">mail</a>',
    '<a href="#top">anchor</a>',
    '<a href="javascript:alert(1)">js</a>',
    '<a href="/relative">relative</a>',
    '<a data-postwire-track="off" href="https://e.test/">off</a>',
    '<a href="https://a.test/x?y=1&amp;z=2">1 again</a>',
    '<a name="no-href">no href</a>',
  ].join('\n');

  test('only http(s) links, decoded as a browser reads them, each once', () => {
    assert.deepEqual(trackedLinks(html), [
      'https://a.test/x?y=1&z=2',
      'http://b.test/',
      'https://c.test/unquoted',
      'HTTPS://D.TEST/',
    ]);
  });

  test('rewriting replaces exactly those hrefs, everything else stays byte for byte', () => {
    const links = trackedLinks(html);
    const out = rewriteLinks(html, links, (index) => `https://t.test/c/${index}?a=1&b=2`);
    assert.equal((out.match(/https:\/\/t\.test\/c\/0\?a=1&amp;b=2/g) ?? []).length, 2);
    for (const index of [1, 2, 3]) assert.ok(out.includes(`"https://t.test/c/${index}?a=1&amp;b=2"`));
    for (const kept of ['mailto:x@y.test', '#top', 'javascript:alert(1)', '/relative', 'https://e.test/'])
      assert.ok(out.includes(kept), kept);
    assert.ok(out.includes("class='b'"));
  });

  test('the open pixel goes before the last </body>, or at the end', () => {
    assert.equal(
      addOpenPixel('<html><body><p>x</p></body></html>', 'https://t.test/o/1'),
      '<html><body><p>x</p><img src="https://t.test/o/1" width="1" height="1" alt="" style="display:block;width:1px;height:1px;border:0" /></body></html>',
    );
    assert.ok(addOpenPixel('<p>x</p>', 'https://t.test/o/1').startsWith('<p>x</p><img '));
  });
});

describe('the RFC 8058 body', () => {
  test('form-urlencoded or multipart List-Unsubscribe=One-Click, nothing else', () => {
    assert.equal(isOneClickBody('List-Unsubscribe=One-Click'), true);
    assert.equal(isOneClickBody('List-Unsubscribe=One-Click\r\n'), true);
    assert.equal(
      isOneClickBody(
        '--b\r\nContent-Disposition: form-data; name="List-Unsubscribe"\r\n\r\nOne-Click\r\n--b--\r\n',
      ),
      true,
    );
    for (const body of [
      '',
      'List-Unsubscribe=Yes',
      '{"List-Unsubscribe":"One-Click"}',
      undefined,
      {},
      'One-Click',
    ])
      assert.equal(isOneClickBody(body), false, JSON.stringify(body));
  });
});
