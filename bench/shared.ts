// What bench/api.ts and its server child (bench/server.ts) agree on, and what the benchmarks share.

import { execFileSync } from 'node:child_process';
import os from 'node:os';

/** Whether the benchmark can pin itself and its server to separate CPUs (taskset, and two CPUs or more). */
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

/** Parent → child. */
export type ParentMessage =
  /** For the bare server: the real answers to mimic, and the real read server's database to query. */
  | { type: 'payloads'; list: string; created: string; database: string; projectId: string }
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
      database?: string;
      projectId?: string;
    }
  | { type: 'cpu'; micros: number }
  | { type: 'profiled' };
