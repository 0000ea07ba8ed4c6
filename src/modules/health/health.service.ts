import { type Kysely, sql } from 'kysely';
import { migrationStatus } from '../../db/migrate.ts';
import type { Database } from '../../db/schema.ts';
import type { Clock } from '../../lib/clock.ts';
import { silentWhenDead } from '../../queue/heartbeats.repo.ts';
import type { RunningQueueWorkers } from '../../queue/running-workers.ts';
import type { ReadinessCheck, ReadinessView } from './health.schemas.ts';

export interface HealthServiceDeps {
  db: Kysely<Database>;
  clock: Clock;
  /** This process's queue workers; none in `serve --no-worker`, and then nothing is checked for them. */
  workers: RunningQueueWorkers;
  /** READINESS_TIMEOUT: each database check fails when it has not answered within this. */
  timeoutMs: number;
  /** WORKER_DEAD_AFTER. */
  workerDeadAfterMs: number;
}

/** A check's question did not get its answer in time. */
class TimedOut extends Error {}

export function createHealthService({ db, clock, workers, timeoutMs, workerDeadAfterMs }: HealthServiceDeps) {
  // The point at which the other workers count a silent worker dead and take its jobs (queue/runtime.ts):
  // a worker whose last heartbeat is older does no work anyone can rely on.
  const staleAfterMs = silentWhenDead(workerDeadAfterMs);

  async function database(): Promise<ReadinessCheck> {
    try {
      await bounded(sql`SELECT 1`.execute(db));
      return { name: 'database', status: 'pass', detail: 'the database answered' };
    } catch (error) {
      return { name: 'database', status: 'fail', detail: failure('the database', error) };
    }
  }

  async function migrations(): Promise<ReadinessCheck> {
    try {
      const { pending, unknown } = await bounded(migrationStatus(db));
      if (unknown.length > 0) {
        return {
          name: 'migrations',
          status: 'fail',
          detail: `the database holds migrations this version does not know (${unknown.join(', ')}): a newer version migrated it`,
        };
      }
      if (pending.length > 0) {
        return {
          name: 'migrations',
          status: 'fail',
          detail: `migrations not applied yet: ${pending.join(', ')}`,
        };
      }
      return { name: 'migrations', status: 'pass', detail: 'every migration of this version is applied' };
    } catch (error) {
      return { name: 'migrations', status: 'fail', detail: failure('the migrations table', error) };
    }
  }

  function heartbeats(): ReadinessCheck | undefined {
    const running = workers.list();
    if (running.length === 0) return undefined;
    const now = clock.now().getTime();
    const silent = running
      .filter(({ worker }) => {
        const last = worker.lastHeartbeatAt();
        return last === undefined || now - last > staleAfterMs;
      })
      .map(({ queue }) => queue);
    if (silent.length > 0) {
      return {
        name: 'workers',
        status: 'fail',
        detail: `no heartbeat recorded within ${staleAfterMs} ms from the ${silent.join(', ')} worker(s)`,
      };
    }
    return {
      name: 'workers',
      status: 'pass',
      detail: `${running.map(({ queue }) => queue).join(', ')} workers heartbeating`,
    };
  }

  /** Waits at most the timeout; the query itself may go on (on PostgreSQL, holding its connection) until it ends. */
  async function bounded<T>(work: Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => reject(new TimedOut()), timeoutMs);
    });
    try {
      return await Promise.race([work, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  function failure(what: string, error: unknown): string {
    if (error instanceof TimedOut) return `${what} did not answer within ${timeoutMs} ms`;
    // The driver's message says what is wrong (refused, closed, no such table) without credentials.
    return `${what} could not be read: ${error instanceof Error ? error.message : String(error)}`;
  }

  return {
    /** The process is ready when the database answers, its migrations match this code and its workers beat. */
    async readiness(): Promise<ReadinessView> {
      const databaseCheck = await database();
      const checks: ReadinessCheck[] = [databaseCheck];
      checks.push(
        databaseCheck.status === 'pass'
          ? await migrations()
          : { name: 'migrations', status: 'fail', detail: 'not checked: the database did not answer' },
      );
      const workerCheck = heartbeats();
      if (workerCheck) checks.push(workerCheck);
      const ready = checks.every((check) => check.status === 'pass');
      return { status: ready ? 'ready' : 'not_ready', checks };
    },
  };
}

export type HealthService = ReturnType<typeof createHealthService>;
