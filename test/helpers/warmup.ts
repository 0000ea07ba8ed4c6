import assert from 'node:assert/strict';
import type { Clock } from '../../src/lib/clock.ts';
import { startTestApp, type TestApp } from './app.ts';
import { startDnsServer, type TestDnsServer } from './dns.ts';
import { ownLoopbackAddresses, startSmtpServer, type TestSmtpServer } from './smtp.ts';

/** What the warm-up tests send to: the app, and two destinations through a real DNS server. */
export interface WarmupWorld {
  dns: TestDnsServer;
  app: TestApp;
  /** A large provider: Google, `warm.test`'s MX (gmail-smtp-in.l.google.com). */
  google: TestSmtpServer;
  /** A destination that is not one: `other.test`'s MX. */
  other: TestSmtpServer;
  /** The loopback addresses the two servers listen on. */
  addresses: string[];
  close(): Promise<void>;
}

/**
 * The warm-up tests' world (issue 38): Google's MX host name and another domain's on loopback addresses of the
 * test's own, port 25, found through a real DNS server; the test app on `clock` with `publicUrl` (a broadcast's
 * copies carry an unsubscribe link). The caller stops its workers before `close`.
 */
export async function startWarmupWorld(
  engine: Parameters<typeof startTestApp>[0],
  clock: Clock,
  publicUrl: string,
): Promise<WarmupWorld> {
  const dns = await startDnsServer();
  const addresses = ownLoopbackAddresses(2);
  const [googleAddress = '', otherAddress = ''] = addresses;
  dns.add('warm.test', { type: 'MX', exchange: 'gmail-smtp-in.l.google.com', priority: 5 });
  dns.add('gmail-smtp-in.l.google.com', { type: 'A', address: googleAddress });
  dns.add('other.test', { type: 'MX', exchange: 'mx.other.test', priority: 10 });
  dns.add('mx.other.test', { type: 'A', address: otherAddress });
  const google = await startSmtpServer({ host: googleAddress, port: 25 });
  const other = await startSmtpServer({ host: otherAddress, port: 25 });
  // Accepted for direct delivery, as the worker below sends (the paced lanes' index, migration 0047).
  const app = await startTestApp(engine, {
    allowPrivateUrls: true,
    clock,
    publicUrl,
    config: { mailTransport: 'direct' },
  });
  return {
    dns,
    app,
    google,
    other,
    addresses,
    async close() {
      await app.close();
      await google.close();
      await other.close();
      await dns.close();
    },
  };
}

/**
 * Reads the emails `ids` and asserts that `count` of them wait for the warm-up (`delayed`, their recipient
 * `throttled` with reason `warmup` until `until`, no attempt used); answers every view read and the waiting
 * recipients, for the caller to check why each waits.
 */
export async function assertWaitingForWarmup(
  app: TestApp,
  ids: string[],
  count: number,
  until: string,
): Promise<{ views: any[]; waiting: any[] }> {
  const views = await Promise.all(ids.map(async (id) => (await app.request('GET', `/v1/emails/${id}`)).body));
  const waiting = views.filter((view) => view.status === 'delayed');
  assert.equal(waiting.length, count, JSON.stringify(views.map((view) => view.status)));
  const recipients = waiting.map((view) => {
    const [recipient] = view.recipients;
    assert.deepEqual(recipient.throttled, { reason: 'warmup', until });
    assert.equal(recipient.attempts, 0);
    return recipient;
  });
  return { views, waiting: recipients };
}
