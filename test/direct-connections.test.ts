import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import { ALL_ENGINES, engineSkip, startTestApp, TEST_SENDING_SETTINGS, type TestApp } from './helpers/app.ts';
import { startDnsServer, type TestDnsServer } from './helpers/dns.ts';
import {
  numberedAddresses,
  publishOwnMx,
  sendEach,
  startThrottlingServer,
  type ThrottlingServer,
} from './helpers/throttling-smtp.ts';
import { startSendingWorker, testDirectTransport } from './helpers/sending.ts';
import { until } from './helpers/until.ts';

// Issue 38, messages per connection: direct delivery keeps a connection that delivered for the next message
// to the same server, up to the destination's messages per connection, never more connections than attempts
// in flight; a kept connection the server dropped in the meantime costs the message nothing.

const OPERATOR_TOKEN = 'operator-token-0123456789';
const PER_CONNECTION = 5;
const PER_HOST = 3;

for (const engine of ALL_ENGINES) {
  describe(`connections kept between messages (${engine})`, { skip: engineSkip(engine) }, () => {
    let dns: TestDnsServer;
    let app: TestApp;
    let kept: ThrottlingServer;
    let dropping: ThrottlingServer;
    let worker: SendingWorker;

    before(async () => {
      dns = await startDnsServer();
      const [keptAddress, droppingAddress] = publishOwnMx(dns, 'kept.test', 'dropping.test');
      kept = await startThrottlingServer({ address: keptAddress, now: Date.now });
      dropping = await startThrottlingServer({ address: droppingAddress, now: Date.now, dropKept: true });
      app = await startTestApp(engine, {
        allowPrivateUrls: true,
        config: { metricsToken: OPERATOR_TOKEN, mailTransport: 'direct' },
      });
      // The operator's limit, read by the worker at its first look over the queue.
      const override = await app.request('PUT', '/v1/destinations/overrides/mx.kept.test', {
        key: null,
        headers: { authorization: `Bearer ${OPERATOR_TOKEN}` },
        body: { messages_per_connection: PER_CONNECTION },
      });
      assert.equal(override.status, 200, JSON.stringify(override.body));
      worker = await startSendingWorker(app, {
        transport: testDirectTransport(dns.address),
        settings: {
          ...TEST_SENDING_SETTINGS,
          concurrency: 8,
          concurrencyPerHost: PER_HOST,
          timeoutMs: 15_000,
        },
      });
    });
    after(async () => {
      await worker?.stop();
      await app?.close();
      await kept?.close();
      await dropping?.close();
      await dns?.close();
    });

    const send = (to: string[]) => sendEach(app, to);
    const addresses = (domain: string, count: number) => numberedAddresses(domain, 0, count);

    test("messages to one server share connections, each carrying at most the destination's messages per connection", async () => {
      await send(addresses('kept.test', 40));
      await until(
        () => kept.received.length === 40,
        20_000,
        () => `${kept.received.length} of 40 arrived`,
      );
      assert.deepEqual(
        [...new Set(kept.received)].sort(),
        addresses('kept.test', 40).sort(),
        'every message once',
      );
      // Each connection is closed after its fifth message, or when idle: wait for all of them to close.
      await until(
        () => kept.messagesPerConnection.reduce((sum, count) => sum + count, 0) === 40,
        20_000,
        () => `connections closed so far carried ${JSON.stringify(kept.messagesPerConnection)}`,
      );
      assert.ok(
        kept.messagesPerConnection.every((count) => count <= PER_CONNECTION),
        JSON.stringify(kept.messagesPerConnection),
      );
      // Fewer connections than messages (a connection per message was 40), never more at once than attempts.
      assert.ok(kept.attempts.length < 40 / 2, `${kept.attempts.length} connections for 40 messages`);
      assert.ok(kept.maxOpen <= PER_HOST, `${kept.maxOpen} open at once`);
    });

    test('a kept connection the server drops as the next message begins: the message goes on a new one, no attempt used', async () => {
      const ids = await send(addresses('dropping.test', 12));
      await until(
        () => dropping.received.length === 12,
        20_000,
        () => `${dropping.received.length} of 12 arrived`,
      );
      assert.deepEqual([...new Set(dropping.received)].sort(), addresses('dropping.test', 12).sort());
      assert.ok(dropping.dropped >= 1, 'a kept connection was dropped');
      await until(
        async () => {
          for (const id of ids) {
            if ((await app.request('GET', `/v1/emails/${id}`)).body.status !== 'delivered') return false;
          }
          return true;
        },
        20_000,
        'every email delivered',
      );
      for (const id of ids) {
        const email = (await app.request('GET', `/v1/emails/${id}`)).body;
        assert.equal(email.recipients[0].attempts, 1, JSON.stringify(email.recipients[0]));
      }
    });
  });
}
