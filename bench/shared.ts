// What bench/api.ts and its server child (bench/server.ts) agree on, and what the benchmarks share.

import { type ChildProcess, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import os from 'node:os';
import pg from 'pg';

/** Whether the benchmark can pin itself and its server to separate CPUs (taskset, and two CPUs or more). */
/** The middle value; with an even count the mean of the two middle ones (not the upper: that flattered 2 rounds). */
export function median(numbers: number[]): number {
  const sorted = [...numbers].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

export function canPin(noPin: boolean): boolean {
  if (noPin || os.availableParallelism() < 2) return false;
  try {
    execFileSync('taskset', ['-V'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Webhooks in the project when `GET /v1/webhooks` is measured. */
export const WEBHOOK_COUNT = 20;

/** The body of every measured `POST /v1/webhooks`: a public https target, a signing secret, the seed's fields. */
export const CREATE_BODY = {
  url: 'https://hooks.example.com/postwire/bench',
  events: ['email.sent', 'email.delivered', 'email.bounced'],
  enabled: true,
  secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
};

/** The body of every measured `POST /v1/emails` (bench/send.ts sends the same message, numbered): one recipient. */
export function emailMessage(i: number) {
  return {
    from: 'Bench <bench@example.com>',
    to: `user${i}@example.org`,
    subject: `Your receipt #${i}`,
    html: `<p>Hello user ${i},</p><p>Thanks for your order. Your receipt number is <b>${i}</b>.</p>`,
    text: `Hello user ${i},\n\nThanks for your order. Your receipt number is ${i}.`,
  };
}

/** Parent → child. */
export type ParentMessage =
  /**
   * For the bare server: the real answers to mimic, and the real read server's SQLite file to query (none on
   * PostgreSQL, where the bare+sql route is left out).
   */
  | {
      type: 'payloads';
      list: string;
      created: string;
      accepted: string;
      database: string | undefined;
      projectId: string;
    }
  | { type: 'cpu' }
  /** CPU-profile the measured window only, not start-up, set-up and warm-up. */
  | { type: 'profile-start' }
  | { type: 'profile-stop'; file: string }
  | { type: 'stop' };

/** Child → parent. */
export type ChildMessage =
  | {
      type: 'ready';
      port: number;
      /** The real server's: its API key, answers, database file (left for the parent to delete) and project. */
      key?: string;
      list?: string;
      created?: string;
      /** A `POST /v1/emails` answer (202). */
      accepted?: string;
      /** The SQLite file; none on PostgreSQL. */
      database?: string | undefined;
      projectId?: string;
    }
  | { type: 'cpu'; micros: number }
  | { type: 'profiled' };

/**
 * A PostgreSQL schema of the benchmark's own, dropped at the end. BENCH_SCHEMA_PREFIX (default `bench`) tells
 * one harness's schemas from another's when several share a server.
 */
export function benchSchemaName(prefix = process.env.BENCH_SCHEMA_PREFIX ?? 'bench'): string {
  return `${prefix}_${randomBytes(6).toString('hex')}`;
}

export type BenchEngine = 'sqlite' | 'postgres';

/** One target, Postwire against the bare baseline in the same run: what `--json` prints per target. */
export interface TargetResult {
  /** What is measured, as bench/targets.ts and bench/README.md name it. */
  target: string;
  engine: BenchEngine;
  /** Per second: requests answered, emails delivered or webhook deliveries done. */
  postwire: number;
  bare: number;
  ratio: number;
  /**
   * The same comparison by CPU time per unit of the process measured (bare ÷ Postwire): what each would reach
   * with a core to itself, so steadier than `ratio` when other work shares the machine. PostgreSQL's own CPU
   * is not in it.
   */
  cpuRatio: number;
  /** The ratio aimed at (issue 12). */
  aim: number;
  /** Whatever makes this figure doubtful (failed requests, a capped window, other work on the machine). */
  warnings: string[];
}

/** Emit → receipt at low load (bench/delivery.ts). */
export interface LatencyResult {
  engine: BenchEngine;
  worker: string;
  events: number;
  received: number;
  p99Ms: number;
  aimMs: number;
}

/** What a benchmark run with `--json` writes to stdout, and nothing else. */
export interface BenchReport {
  bench: string;
  targets: TargetResult[];
  latencies: LatencyResult[];
  /** Doubts about the whole run (load on the machine, a skipped engine). */
  warnings: string[];
}

/**
 * Where a benchmark writes its report for people: stdout, or stderr under `--json` so that stdout carries only
 * the one JSON document (bench/targets.ts reads it and lets stderr show progress).
 */
export function humanOutput(json: boolean): (...lines: unknown[]) => void {
  return json ? console.error : console.log;
}

export const DEFAULT_POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/test';

/**
 * The PostgreSQL server to use (`given`, else the default), or why there is none. Only loopback servers: the
 * benchmarks stay on this machine.
 */
export async function findPostgres(given: string | undefined): Promise<{ url: string } | { skip: string }> {
  const url = given ?? DEFAULT_POSTGRES_URL;
  let host: string;
  try {
    host = new URL(url).hostname.replace(/^\[|\]$/g, '');
  } catch {
    return { skip: 'the PostgreSQL URL does not parse' };
  }
  if (!['127.0.0.1', 'localhost', '::1'].includes(host)) {
    return { skip: `${host} is not a loopback address (this bench only talks to this machine)` };
  }
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return { url };
  } catch (error) {
    return { skip: `${given ? 'the given' : 'the default'} PostgreSQL is not reachable (${String(error)})` };
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * CPU-profiles this process from start() to stop(file), so that a profile shows the measured window only,
 * not start-up, set-up and warm-up. One at a time; summarise the file with bench/profile.ts.
 */
export function createWindowProfiler() {
  const session = new Session();
  return {
    async start() {
      session.connect();
      await session.post('Profiler.enable');
      await session.post('Profiler.start');
    },
    async stop(file: string) {
      const { profile } = await session.post('Profiler.stop');
      writeFileSync(file, JSON.stringify(profile));
      session.disconnect();
    },
  };
}

/** Asks a bench's child process to stop (`ask`) and waits for its exit; one that has not gone in 15 s is killed. */
export function stopChild(child: ChildProcess, ask: () => void): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    ask();
  });
}
