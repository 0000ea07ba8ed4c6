import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Readable } from 'node:stream';
import { getMetricsFromStream, type PromHistogramData, type PromMetrics } from 'prom2javascript';
import { buildApp } from '../src/app.ts';
import { openDatabase } from '../src/db/connection.ts';
import { silentWorkerLogger } from '../src/lib/worker-logger.ts';
import { createHealthService } from '../src/modules/health/health.service.ts';
import { createRunningQueueWorkers, QUEUE_NAMES } from '../src/queue/running-workers.ts';
import { type RunningWorkers, startWorkers } from '../src/workers.ts';
import {
  createTestDatabase,
  createTestServices,
  ALL_ENGINES,
  engineSkip,
  startTestApp,
  type TestApp,
} from './helpers/app.ts';
import {
  createProcessDatabase,
  requestJson,
  startServerProcess,
  startWorkerProcess,
} from './helpers/process.ts';
import { startReceiver, type Receiver } from './helpers/receiver.ts';
import { until } from './helpers/until.ts';

const METRICS_TOKEN = 'metrics-token-for-the-test-0123456789';

type Families = PromMetrics;
type Sample = { labels: Record<string, string>; value?: number } & Partial<PromHistogramData>;

/**
 * The exposition, parsed by a Prometheus text-format parser of its own (prom2javascript), not prom-client
 * reading itself back. prom-client writes an empty event-loop histogram's mean as `Nan`, which Prometheus reads
 * (Go's ParseFloat ignores case) and prom2javascript cannot: those samples are left out.
 */
function parseExposition(text: string): Promise<Families> {
  return getMetricsFromStream(Readable.from([text.replace(/^\S+ Nan\n/gm, '')]));
}

/** The samples of one metric whose labels include `labels`. */
function samples(families: Families, name: string, labels: Record<string, string> = {}): Sample[] {
  const family = families[name];
  assert.ok(family, `${name} is exported`);
  return (family.data as Sample[]).filter((sample) =>
    Object.entries(labels).every(([label, value]) => sample.labels[label] === value),
  );
}

/** The value of the one sample of `name` with `labels` (a counter or a gauge); 0 when there is none. */
function value(families: Families, name: string, labels: Record<string, string> = {}): number {
  const found = samples(families, name, labels);
  assert.ok(found.length <= 1, `one ${name} sample for ${JSON.stringify(labels)}`);
  return found[0]?.value ?? 0;
}

for (const engine of ALL_ENGINES) {
  describe(`health and metrics (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let workers: RunningWorkers | undefined;
    let delivered: Receiver;
    let refusing: Receiver;

    const scrape = async (): Promise<Families> => {
      const response = await fetch(`${api.baseUrl}/metrics`, {
        headers: { authorization: `Bearer ${METRICS_TOKEN}` },
      });
      assert.equal(response.status, 200);
      assert.match(response.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
      return parseExposition(await response.text());
    };

    before(async () => {
      delivered = await startReceiver();
      refusing = await startReceiver({ fallback: { status: 500, body: 'no' } });
      api = await startTestApp(engine, {
        allowPrivateUrls: true,
        resolver: async () => ['127.0.0.1'],
        // A failed attempt's retry an hour later: the refusing webhook's one failure stays one while the test runs.
        config: { metricsToken: METRICS_TOKEN, webhookRetrySchedule: [0, 3_600_000] },
      });
    });

    after(async () => {
      await workers?.stop();
      await api.close();
      await delivered.close();
      await refusing.close();
    });

    it("has prom-client's process and Node.js families, and every metric the Grafana dashboard names", async () => {
      const families = await scrape();
      for (const name of [
        'process_cpu_seconds_total',
        'process_resident_memory_bytes',
        'nodejs_eventloop_lag_p99_seconds',
        'nodejs_heap_size_used_bytes',
        'nodejs_gc_duration_seconds',
      ]) {
        assert.ok(families[name], `${name} is exported`);
      }
      const dashboard = JSON.parse(
        readFileSync(new URL('../packaging/grafana-dashboard.json', import.meta.url), 'utf8'),
      );
      const expressions: string[] = dashboard.panels.flatMap((panel: any) =>
        panel.targets.map((target: any) => target.expr),
      );
      assert.ok(expressions.length >= 10);
      for (const expression of expressions) {
        const named = expression.match(/\b(?:postwire|process|nodejs)_[a-z0-9_]+\b/g) ?? [];
        assert.ok(named.length > 0, `${expression} names a metric`);
        for (const name of named) {
          // A histogram's series are its family's name with _bucket, _sum or _count.
          const family = families[name] ? name : name.replace(/_(bucket|sum|count)$/, '');
          // The pool families exist on PostgreSQL only, where the pool does.
          if (family.startsWith('postwire_db_pool_') && engine === 'sqlite') continue;
          assert.ok(families[family], `${name} (in ${expression}) is exported`);
        }
      }
    });

    it('answers 401 without the metrics token, or with an API key or a wrong one', async () => {
      for (const authorization of [
        undefined,
        `Bearer ${api.key}`,
        `Bearer ${METRICS_TOKEN}x`,
        METRICS_TOKEN,
      ]) {
        const response = await fetch(`${api.baseUrl}/metrics`, {
          headers: authorization ? { authorization } : {},
        });
        assert.equal(response.status, 401, String(authorization));
        assert.equal(((await response.json()) as any).error.code, 'invalid_metrics_token');
      }
    });

    it('counts what users see: sends, their outcomes, webhook attempts, requests by route and the queues', async () => {
      for (const [receiver, events] of [
        [delivered, ['email.sent', 'email.delivered', 'email.bounced']],
        [refusing, ['email.delivered']],
      ] as const) {
        const created = await api.request('POST', '/v1/webhooks', { body: { url: receiver.url, events } });
        assert.equal(created.status, 201);
      }
      const sent = await api.request('POST', '/v1/emails', {
        body: {
          from: 'Postwire <hello@example.com>',
          to: ['ada@example.net', 'bounced@example.test'],
          subject: 'Metrics',
          text: 'Counted.',
        },
      });
      assert.equal(sent.status, 202);

      // No worker runs yet: both recipients wait in the sending queue.
      let families = await scrape();
      assert.equal(value(families, 'postwire_emails_accepted_total', { source: 'api' }), 1);
      assert.equal(value(families, 'postwire_queue_depth', { queue: 'sending' }), 2);
      assert.ok(value(families, 'postwire_queue_oldest_due_age_seconds', { queue: 'sending' }) >= 0);
      for (const queue of QUEUE_NAMES) {
        assert.equal(samples(families, 'postwire_queue_depth', { queue }).length, 1, queue);
      }

      workers = await startWorkers(api.services, silentWorkerLogger);
      // Delivered: email.sent, email.delivered (ada) and email.bounced; the refusing webhook answers 500.
      await delivered.waitFor(3);
      await refusing.waitFor(1);
      families = await until(async () => {
        const current = await scrape();
        const attempts = samples(current, 'postwire_webhook_attempts_total');
        const total = attempts.reduce((sum, sample) => sum + (sample.value ?? 0), 0);
        return total >= 4 && current;
      });

      assert.equal(value(families, 'postwire_events_total', { type: 'email.sent' }), 1);
      assert.equal(value(families, 'postwire_events_total', { type: 'email.delivered' }), 1);
      assert.equal(value(families, 'postwire_events_total', { type: 'email.bounced' }), 1);
      assert.equal(value(families, 'postwire_events_total', { type: 'email.failed' }), 0);
      assert.equal(value(families, 'postwire_webhook_attempts_total', { result: 'succeeded' }), 3);
      assert.equal(value(families, 'postwire_webhook_attempts_total', { result: 'failed' }), 1);
      assert.equal(value(families, 'postwire_queue_depth', { queue: 'sending' }), 0);
      assert.equal(value(families, 'postwire_queue_oldest_due_age_seconds', { queue: 'sending' }), 0);
      for (const queue of QUEUE_NAMES) {
        assert.equal(samples(families, 'postwire_queue_attempts_in_flight', { queue }).length, 1, queue);
      }
    });

    it('labels requests by route pattern and status, every unknown path under one label', async () => {
      const emails = await api.request('GET', '/v1/emails');
      const id = emails.body.data[0].id as string;
      assert.equal((await api.request('GET', `/v1/emails/${id}`)).status, 200);
      assert.equal((await api.request('GET', '/v1/emails/em_missing')).status, 404);
      for (const path of ['/no/such/path', '/another/unknown?x=1']) {
        assert.equal((await api.request('GET', path, { key: null })).status, 404);
      }

      const families = await scrape();
      const requests = (labels: Record<string, string>) =>
        samples(families, 'postwire_http_request_duration_seconds', labels);
      const byId = requests({ method: 'GET', route: '/v1/emails/:id', status: '200' });
      assert.equal(byId.length, 1);
      assert.equal(byId[0]!.count, 1);
      assert.equal(byId[0]!.buckets!['+Inf'], 1, 'every observation is in the +Inf bucket');
      assert.equal(requests({ route: '/v1/emails/:id', status: '404' })[0]!.count, 1);
      assert.equal(requests({ method: 'POST', route: '/v1/emails', status: '202' })[0]!.count, 1);
      assert.equal(requests({ route: 'unmatched', status: '404' })[0]!.count, 2);
      const routes = new Set(
        samples(families, 'postwire_http_request_duration_seconds').map((sample) => sample.labels.route),
      );
      for (const route of routes) {
        assert.ok(!route!.includes(id) && !route!.includes('no/such'), `the raw URL ${route} is no label`);
      }
    });

    it('counts received reports by outcome', async () => {
      const { db } = api.database.handle;
      const stored = await api.services.inbound.store({
        receivedAt: new Date().toISOString(),
        mailFrom: 'someone@example.org',
        rcptTo: ['postmaster@example.com'],
        remoteAddress: '127.0.0.1',
        raw: Buffer.from('From: someone@example.org\r\nSubject: hello\r\n\r\nNot a report.\r\n'),
      });
      api.services.notifiers.inbound.notify();
      const status = await until(async () => {
        const row = await db
          .selectFrom('inbound_messages')
          .select('status')
          .where('id', '=', stored)
          .executeTakeFirstOrThrow();
        return row.status !== 'pending' && row.status;
      });
      const families = await until(async () => {
        const current = await scrape();
        return value(current, 'postwire_inbound_reports_total', { outcome: status }) === 1 && current;
      });
      assert.equal(samples(families, 'postwire_inbound_reports_total').length, 1);
    });

    it('reports the connection pool where there is one', async () => {
      const families = await scrape();
      if (engine === 'postgres') {
        // test/helpers/app.ts opens each test database with a pool of 5.
        assert.equal(value(families, 'postwire_db_pool_connections', { state: 'max' }), 5);
        assert.ok(value(families, 'postwire_db_pool_connections', { state: 'idle' }) >= 0);
        assert.equal(value(families, 'postwire_db_pool_waiting'), 0);
      } else {
        assert.ok(!Object.keys(families).some((name) => name.startsWith('postwire_db_pool')));
      }
    });

    it('is ready with the database, the migrations and the workers checked, and says which check fails', async () => {
      const ready = await until(async () => {
        const response = await api.request('GET', '/readyz', { key: null });
        return response.status === 200 && response;
      });
      assert.deepEqual(
        ready.body.checks.map((check: { name: string; status: string }) => [check.name, check.status]),
        [
          ['database', 'pass'],
          ['migrations', 'pass'],
          ['workers', 'pass'],
        ],
      );
      assert.equal(ready.body.status, 'ready');

      const { db } = api.database.handle;
      await db
        .insertInto('postwire_migrations' as never)
        .values({ name: '9999_from_a_newer_version', applied_at: new Date().toISOString() } as never)
        .execute();
      try {
        const unknown = await api.request('GET', '/readyz', { key: null });
        assert.equal(unknown.status, 503);
        assert.equal(unknown.body.status, 'not_ready');
        const migrations = unknown.body.checks.find((check: { name: string }) => check.name === 'migrations');
        assert.equal(migrations.status, 'fail');
        assert.match(migrations.detail, /9999_from_a_newer_version/);
      } finally {
        await db
          .deleteFrom('postwire_migrations' as never)
          .where('name' as never, '=', '9999_from_a_newer_version' as never)
          .execute();
      }
      assert.equal((await api.request('GET', '/readyz', { key: null })).status, 200);
      assert.deepEqual((await api.request('GET', '/healthz', { key: null })).body, { status: 'ok' });
    });
  });

  describe(
    `health and metrics without METRICS_TOKEN, or without a database (${engine})`,
    { skip: engineSkip(engine) },
    () => {
      it('answers 404 at /metrics when no token is configured, saying how to turn it on', async () => {
        const api = await startTestApp(engine);
        try {
          const response = await api.request('GET', '/metrics', { key: null });
          assert.equal(response.status, 404);
          assert.deepEqual(response.body.error, {
            code: 'metrics_off',
            message:
              'GET /metrics is off: the operator turns it on by setting METRICS_TOKEN (at least 16 characters); ' +
              'Prometheus then sends Authorization: Bearer <METRICS_TOKEN>.',
            request_id: response.headers.get('x-request-id'),
          });
          const withKey = await api.request('GET', '/metrics');
          assert.equal(withKey.status, 404);
          assert.equal(withKey.body.error.code, 'metrics_off');
        } finally {
          await api.close();
        }
      });

      it('is alive but not ready once its database is closed', async () => {
        const database = await createTestDatabase(engine);
        // A second connection to the same database, for the app: closed by the test, while the first drops it.
        const handle = await openDatabase(
          engine === 'postgres'
            ? { url: database.env.DATABASE_URL! }
            : { sqlitePath: path.join(database.env.POSTWIRE_DATA_DIR!, 'postwire.db') },
        );
        const services = createTestServices(handle);
        const app = await buildApp(services);
        try {
          assert.equal((await app.inject({ method: 'GET', url: '/readyz' })).statusCode, 200);
          await handle.close();
          const response = await app.inject({ method: 'GET', url: '/readyz' });
          assert.equal(response.statusCode, 503);
          const body = response.json();
          assert.deepEqual(
            body.checks.map((check: { name: string; status: string }) => [check.name, check.status]),
            [
              ['database', 'fail'],
              ['migrations', 'fail'],
            ],
          );
          assert.equal((await app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200);
        } finally {
          await app.close();
          await services.close();
          await database.drop();
        }
      });
    },
  );
}

describe('readiness of a process whose worker stopped its heartbeat', () => {
  it('fails the workers check once a heartbeat is older than two thirds of WORKER_DEAD_AFTER', async () => {
    const now = Date.parse('2026-11-26T12:00:00.000Z');
    const workers = createRunningQueueWorkers();
    let lastBeat: number | undefined = now - 9_000;
    workers.add({ queue: 'sending', worker: { attemptsInFlight: () => 0, lastHeartbeatAt: () => lastBeat } });
    const database = await createTestDatabase('sqlite');
    try {
      const health = createHealthService({
        db: database.handle.db,
        clock: { now: () => new Date(now) },
        workers,
        timeoutMs: 1000,
        workerDeadAfterMs: 15_000,
      });
      assert.equal((await health.readiness()).status, 'ready');
      lastBeat = now - 10_001;
      const stale = await health.readiness();
      assert.equal(stale.status, 'not_ready');
      assert.match(stale.checks.find((check) => check.name === 'workers')!.detail, /sending/);
      lastBeat = undefined;
      assert.equal((await health.readiness()).status, 'not_ready');
    } finally {
      await database.drop();
    }
  });
});

// A worker process counts what it does (sending, webhook attempts, reports read) in its own process: with
// WORKER_HTTP_PORT it answers its own probes and metrics, beside the API process's.
for (const engine of ALL_ENGINES) {
  describe(`a worker process's own probes and metrics (${engine})`, { skip: engineSkip(engine) }, () => {
    it('serves /healthz, /readyz and /metrics with its own counts, and nothing of the API', async (t) => {
      const database = await createProcessDatabase(engine);
      t.after(() => database.cleanup());
      const key = 'pw_worker_metrics_bootstrap_key_0123456789';
      const env = { ...database.env, POSTWIRE_BOOTSTRAP_KEY: key, METRICS_TOKEN, LOG_LEVEL: 'info' };
      const api = await startServerProcess(env, ['src/cli.ts', 'serve', '--no-worker']);
      t.after(() => api.stop());
      const worker = await startWorkerProcess({ ...env, WORKER_HTTP_PORT: '0' });
      t.after(() => worker.stop());
      assert.match(worker.url, /^http:\/\/127\.0\.0\.1:\d+$/);

      const sent = await requestJson(`${api.url}/v1/emails`, key, 'POST', {
        from: 'shop@acme.test',
        to: ['ada@example.org'],
        subject: 'Counted where it was sent',
        text: 'One line,\nand another.',
      });
      assert.equal(sent.status, 202, JSON.stringify(sent.body));
      await until(
        async () =>
          (await requestJson(`${api.url}/v1/emails/${sent.body.id}`, key, 'GET')).body.status !== 'queued',
      );

      const scrapeOf = async (url: string) => {
        const response = await fetch(`${url}/metrics`, {
          headers: { authorization: `Bearer ${METRICS_TOKEN}` },
        });
        assert.equal(response.status, 200);
        return parseExposition(await response.text());
      };
      // The worker sent it: its count, not the API's.
      assert.equal(value(await scrapeOf(worker.url), 'postwire_events_total', { type: 'email.sent' }), 1);
      assert.equal(value(await scrapeOf(api.url), 'postwire_events_total', { type: 'email.sent' }), 0);
      assert.equal(value(await scrapeOf(api.url), 'postwire_emails_accepted_total', { source: 'api' }), 1);

      assert.equal((await fetch(`${worker.url}/healthz`)).status, 200);
      const ready = await fetch(`${worker.url}/readyz`);
      assert.equal(ready.status, 200);
      const checks = ((await ready.json()) as { checks: Array<{ name: string; status: string }> }).checks;
      assert.deepEqual(
        checks.map((check) => [check.name, check.status]),
        [
          ['database', 'pass'],
          ['migrations', 'pass'],
          ['workers', 'pass'],
        ],
      );
      assert.equal((await fetch(`${worker.url}/metrics`)).status, 401);
      assert.equal((await requestJson(`${worker.url}/v1/emails`, key, 'GET')).status, 404);
    });
  });
}
