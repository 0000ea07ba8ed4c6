// Which source IP a message leaves from (DIRECT_SOURCE_IPS, docs/guides/warm-up.md). A warming address must be
// given its day's allowance to each large provider and no more, so it goes first: to a large provider, the
// warming addresses in the order listed take what their allowance permits, and the rest leaves from the warm
// ones in turn. Mail over every address's allowance (no warm one listed) waits for the next UTC day,
// `throttled` like a domain's warm-up. Mail to any other destination leaves from every address in turn: those
// judge a sender by its mail, not by a volume history. An address whose warm-up starts on a later day is not
// one of them before that day. The counts are shared by every worker (warmups.repo.ts).
// Only an address whose own state of the destination lets it start now takes part (source-shaping.ts: each
// address is suspended and paced on its own); among the warm ones, the shaping's choice is kept.
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

/** What the destinations' shaping says of each address (source-shaping.ts), for a message starting now. */
export interface SourceReadiness {
  /** The address the shaping chose as the attempt started (its start counted against it). */
  picked: string;
  /** When an address's pair with the destination may start an attempt (epoch ms; now or earlier: at once). */
  readyAt(address: string): number;
}

export interface SourceChooser {
  readonly sources: readonly SourceIp[];
  /**
   * The warming addresses whose day's allowance to a large provider's destination this worker has not found
   * used up, in the order listed: the shaping prefers them (source-shaping.ts).
   */
  preferred(destination: { key: string; provider: string | null }, now: number): string[];
  /**
   * Called one at a time (the warm-up step's decisions, in the order the attempts asked), so an allowance given
   * back is there for the next message. Without `readiness`, every address may be used, warm ones in turn.
   */
  choose(
    destination: { key: string; provider: string | null },
    now: number,
    readiness?: SourceReadiness,
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
  const keyOf = (source: SourceIp, destination: { key: string }) => `${source.address} ${destination.key}`;

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

  async function chooseOne(
    destination: { key: string; provider: string | null },
    now: number,
    readiness: SourceReadiness | undefined,
  ) {
    const sending = deps.sources.filter((source) => sendsAt(source, now));
    if (sending.length === 0) return notYet(now);
    const picked = sending.find((source) => source.address === readiness?.picked);
    // An address the shaping did not pick may be used only if its own pair may start now.
    const mayUse = (source: SourceIp) =>
      !readiness || source === picked || readiness.readyAt(source.address) <= now;
    if (destination.provider === null) return picked ? kept(picked) : inTurn(sending);
    const today = dayOf(now);
    const warming: string[] = [];
    for (const source of sending) {
      const { allowance, day } = allowanceOf(source, now);
      if (allowance === null) continue;
      warming.push(`${source.address} (day ${day}: ${allowance})`);
      if (!mayUse(source)) continue;
      const key = keyOf(source, destination);
      const taken = await blocks.use(key, allowance, now, (size) =>
        deps.repo.takeForSource(
          { source: source.address, destination: destination.key, day: today },
          size,
          allowance,
        ),
      );
      if (taken) return { source, giveBack: () => blocks.giveBack(key) };
    }
    const warm = sending.filter((source) => allowanceOf(source, now).allowance === null);
    if (picked && warm.includes(picked)) return kept(picked);
    const usable = warm.filter(mayUse);
    if (usable.length > 0) return inTurn(usable);
    // Addresses that may take it but not now (their pair with the destination suspended, or at its
    // connections): the warm ones, and the warming ones with allowance left; it waits for the first of them.
    const busy = sending.filter((source) => {
      const { allowance } = allowanceOf(source, now);
      return allowance === null || !blocks.usedUp(keyOf(source, destination), allowance, now);
    });
    if (readiness && busy.length > 0) {
      const at = Math.min(...busy.map((source) => readiness.readyAt(source.address)));
      return {
        until: Math.max(now + 1000, at === Infinity ? now + 60_000 : at),
        reason: `throttled: the source IPs that may send to ${destination.key} are suspended or busy; it waits for them`,
      };
    }
    const until = nextDayStart(now);
    return {
      until,
      reason:
        `throttled: warm-up of the source IPs: the messages to ${destination.key} for ${today} of ` +
        `${warming.join(', ')} are used; it waits until ${new Date(until).toISOString()}`,
    };
  }

  return {
    sources: deps.sources,
    preferred(destination, now) {
      if (destination.provider === null) return [];
      return deps.sources
        .filter((source) => {
          if (!sendsAt(source, now)) return false;
          const { allowance } = allowanceOf(source, now);
          return allowance !== null && !blocks.usedUp(keyOf(source, destination), allowance, now);
        })
        .map((source) => source.address);
    },
    choose: (destination, now, readiness) => chooseOne(destination, now, readiness),
  };
}
