// A worker's part of warm-up allowances (a sending domain's, warmup.ts; a source IP's, source-ips.ts): it takes
// a block of a day's allowance at a time through the database, so the writes are bounded by the allowance (at
// most about a hundred per count and day), never by the mail held, and the allowance holds across workers.
import { DAY_MS, dayOf } from '../../lib/warmup-schedule.ts';

export interface AllowanceBlocks {
  /**
   * Whether one more of today's `allowance` is this worker's (counted): from its block, else from a new block
   * `take` gets (`take(size)` answers how many it got: 0 when the day's allowance is used).
   */
  use(key: string, allowance: number, now: number, take: (size: number) => Promise<number>): Promise<boolean>;
  /** Gives one back to this worker's block (used, then not sent: another check held the message). */
  giveBack(key: string): void;
  /** Whether today's `allowance` of `key` was found used up (no database read: what the last take said). */
  usedUp(key: string, allowance: number, now: number): boolean;
}

export function createAllowanceBlocks(deps: {
  /** Forgets counts of days before this one (YYYY-MM-DD), once a day. */
  pruneCounts(beforeDay: string): Promise<void>;
}): AllowanceBlocks {
  /** What is left of this worker's blocks, and the allowance found used up. */
  const blocks = new Map<string, { left: number; usedUpAt: number }>();
  let blocksDay = '';
  return {
    async use(key, allowance, now, take) {
      const today = dayOf(now);
      if (today !== blocksDay) {
        blocks.clear();
        blocksDay = today;
        // Read for today only; two days back covers workers whose clocks disagree about midnight.
        await deps.pruneCounts(dayOf(now - 2 * DAY_MS));
      }
      const block = blocks.get(key) ?? { left: 0, usedUpAt: 0 };
      blocks.set(key, block);
      // Asked again when the allowance grew since it was found used up (a schedule changed today).
      if (block.left === 0 && block.usedUpAt < allowance) {
        // A block of about a hundredth of the day's allowance: writes bounded by the allowance, and what one
        // worker holds unused at most a hundredth of it.
        block.left = await take(Math.min(50, Math.max(1, Math.ceil(allowance / 100))));
        block.usedUpAt = block.left === 0 ? allowance : 0;
      }
      if (block.left === 0) return false;
      block.left -= 1;
      return true;
    },
    giveBack(key) {
      const block = blocks.get(key);
      if (block) block.left += 1;
    },
    usedUp(key, allowance, now) {
      const block = dayOf(now) === blocksDay ? blocks.get(key) : undefined;
      return block !== undefined && block.left === 0 && block.usedUpAt >= allowance;
    },
  };
}

/** When mail held by a warm-up today may go: the next UTC midnight. */
export const nextDayStart = (now: number) => Math.floor(now / DAY_MS) * DAY_MS + DAY_MS;
