// Which source IP a message leaves from (DIRECT_SOURCE_IPS, docs/guides/warm-up.md). A warming address must be
// given its day's allowance to each large provider and no more, so it goes first: to a large provider, the
// warming addresses in the order listed take what their allowance permits, and the rest leaves from the warm
// ones in turn. Mail over every address's allowance (no warm one listed) waits for the next UTC day,
// `throttled` like a domain's warm-up. Mail to any other destination leaves from every address in turn: those
// judge a sender by its mail, not by a volume history. An address whose warm-up starts on a later day is not
// one of them before that day. The counts are shared by every worker (warmups.repo.ts).
import { type SourceIp, sendsAt } from '../../lib/source-ips.ts';
import { dayOf, warmupDay } from '../../lib/warmup-schedule.ts';
import { createAllowanceBlocks, nextDayStart } from './allowance-blocks.ts';
import type { WarmupHold } from './warmup.ts';
import type { WarmupsRepo } from './warmups.repo.ts';

/** The address a message leaves from; `giveBack` returns its allowance when another check holds it after all. */
export interface SourceChoice {
  source: SourceIp;
  giveBack(): void;
}

export interface SourceChooser {
  /**
   * Called one at a time (the warm-up step's decisions, in the order the attempts asked), so an allowance given
   * back is there for the next message.
   */
  choose(
    destination: { key: string; provider: string | null },
    now: number,
  ): Promise<SourceChoice | WarmupHold>;
}

export function createSourceChooser(deps: {
  sources: readonly SourceIp[];
  repo: Pick<WarmupsRepo, 'takeForSource' | 'pruneCounts'>;
  /** WARMUP_SCHEDULE: a warming address's schedule when it names none. */
  defaultSchedule: readonly number[];
}): SourceChooser {
  const blocks = createAllowanceBlocks(deps.repo);
  let turn = 0;
  const kept = (source: SourceIp): SourceChoice => ({ source, giveBack: () => undefined });
  const inTurn = (among: readonly SourceIp[]) => kept(among[turn++ % among.length]!);
  const allowanceOf = (source: SourceIp, now: number) =>
    source.warmupFrom === undefined
      ? { allowance: null, day: 0 }
      : warmupDay(source.schedule ?? deps.defaultSchedule, source.warmupFrom, now);

  /** None of the addresses sends yet (each one's warm-up starts on a later day): mail waits for the first. */
  function notYet(now: number): WarmupHold {
    // Each has a day 1 here (an address without `warmup=` always sends): `now` only satisfies the type.
    const dayOne = (source: SourceIp) => source.warmupFrom ?? now;
    const until = Math.min(...deps.sources.map(dayOne));
    const starts = deps.sources.map((source) => `${source.address} on ${dayOf(dayOne(source))}`);
    return {
      until,
      reason:
        `throttled: warm-up of the source IPs: none sends yet (${starts.join(', ')}); ` +
        `it waits until ${new Date(until).toISOString()}`,
    };
  }

  async function chooseOne(destination: { key: string; provider: string | null }, now: number) {
    const sending = deps.sources.filter((source) => sendsAt(source, now));
    if (sending.length === 0) return notYet(now);
    if (destination.provider === null) return inTurn(sending);
    const today = dayOf(now);
    const warming: string[] = [];
    for (const source of sending) {
      const { allowance, day } = allowanceOf(source, now);
      if (allowance === null) continue;
      const key = `${source.address} ${destination.key}`;
      const taken = await blocks.use(key, allowance, now, (size) =>
        deps.repo.takeForSource(
          { source: source.address, destination: destination.key, day: today },
          size,
          allowance,
        ),
      );
      if (taken) return { source, giveBack: () => blocks.giveBack(key) };
      warming.push(`${source.address} (day ${day}: ${allowance})`);
    }
    const warm = sending.filter((source) => allowanceOf(source, now).allowance === null);
    if (warm.length > 0) return inTurn(warm);
    const until = nextDayStart(now);
    return {
      until,
      reason:
        `throttled: warm-up of the source IPs: the messages to ${destination.key} for ${today} of ` +
        `${warming.join(', ')} are used; it waits until ${new Date(until).toISOString()}`,
    };
  }

  return { choose: chooseOne };
}
