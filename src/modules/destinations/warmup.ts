// Warm-up (issue 38): a new sending domain earns its reputation with each large provider by sending little at
// first and more each day. A warm-up is a schedule of daily allowances per destination (day 1 first, UTC days
// on the injected clock, day 1 the day it was enabled); past its last day the domain is warm and nothing is
// held. Mail over a day's allowance waits for the next day (`throttled`, reason `warmup`) without using an
// attempt; at midnight it is promoted in queue order, so transactional mail leaves before broadcast copies
// (the bulk band, emails/fair-queue.repo.ts). The count is shared by every worker through the database
// (warmups.repo.ts): a worker takes a block of the day's allowance at a time, so the writes are bounded by the
// allowance (at most about a hundred per destination and day), never by the mail held.
import { parseAddress } from '../../lib/addresses.ts';
import { dayOf, warmupDay } from '../../lib/warmup-schedule.ts';
import { createAllowanceBlocks, nextDayStart } from './allowance-blocks.ts';
import type { WarmupsRepo, WarmupRecord } from './warmups.repo.ts';

/** How often a worker reads the warm-ups again (an API change reaches every worker within this). */
const REFRESH_MS = 1000;

/** Mail a warm-up holds: until when, and why (the recipient's last_response). */
export interface WarmupHold {
  until: number;
  reason: string;
}

export interface WarmupGate {
  /**
   * Whether one more message of `email` may go to `destination` (a built-in provider's; others are not held)
   * now: undefined when it may (counted), else until when it waits. Asked one message at a time, in the
   * order the attempts asked (sending.warmup.ts), so a broadcast copy's take never overtakes a transactional
   * one's.
   */
  admit(
    email: { projectId: string; from: string; dkimDomain: string | null },
    destination: { key: string; provider: string | null },
    now: number,
  ): Promise<WarmupHold | undefined>;
  /** Whether a warm-up may hold `email` (so its destination is worth finding before its attempt). */
  applies(
    email: { projectId: string; from: string; dkimDomain: string | null },
    now: number,
  ): Promise<boolean>;
}

/** A sending worker's warm-ups: read at most once a second, counted per source through the database. */
export function createWarmupGate(deps: {
  repo: Pick<WarmupsRepo, 'enabled' | 'take' | 'pruneCounts'>;
  source: string;
  /** WARMUP_SCHEDULE: a warm-up's schedule when it names none. */
  defaultSchedule: readonly number[];
}): WarmupGate {
  let warmups: WarmupRecord[] = [];
  let readAt = -Infinity;
  /** The read in flight: attempts that ask meanwhile wait for it, and go on in the order they asked. */
  let reading: Promise<void> | undefined;
  /** This worker's part of each day's allowance. */
  const blocks = createAllowanceBlocks(deps.repo);

  async function warmupOf(
    email: { projectId: string; from: string; dkimDomain: string | null },
    now: number,
  ) {
    if (now - readAt >= REFRESH_MS) {
      readAt = now;
      reading ??= deps.repo
        .enabled()
        .then((rows) => {
          warmups = rows;
        })
        .finally(() => {
          reading = undefined;
        });
    }
    if (reading) await reading;
    if (warmups.length === 0) return undefined;
    const parsed = parseAddress(email.from);
    const from = parsed.ok ? parsed.value.domain.toLowerCase() : '';
    return warmups.find(
      (warmup) =>
        warmup.projectId === email.projectId &&
        (warmup.domainName === email.dkimDomain ||
          warmup.domainName === from ||
          from.endsWith(`.${warmup.domainName}`)),
    );
  }

  return {
    async applies(email, now) {
      const warmup = await warmupOf(email, now);
      if (!warmup) return false;
      return warmupDay(warmup.schedule ?? deps.defaultSchedule, warmup.startedAt, now).allowance !== null;
    },
    admit: admitOne,
  };

  async function admitOne(
    email: { projectId: string; from: string; dkimDomain: string | null },
    destination: { key: string; provider: string | null },
    now: number,
  ): Promise<WarmupHold | undefined> {
    if (destination.provider === null) return undefined;
    const warmup = await warmupOf(email, now);
    if (!warmup) return undefined;
    const { allowance, day } = warmupDay(warmup.schedule ?? deps.defaultSchedule, warmup.startedAt, now);
    if (allowance === null) return undefined;
    const today = dayOf(now);
    const taken = await blocks.use(`${warmup.domainId} ${destination.key}`, allowance, now, (size) =>
      deps.repo.take(
        { source: deps.source, domainId: warmup.domainId, destination: destination.key, day: today },
        size,
        allowance,
      ),
    );
    if (taken) return undefined;
    const until = nextDayStart(now);
    return {
      until,
      reason:
        `throttled: warm-up day ${day} of ${warmup.domainName}: its ${allowance} messages to ` +
        `${destination.key} for ${today} are used; it waits until ${new Date(until).toISOString()}`,
    };
  }
}
