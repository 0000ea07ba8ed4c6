import type { Clock } from '../../lib/clock.ts';
import type { SourceIp } from '../../lib/source-ips.ts';
import type { DestinationSync } from '../destinations/destinations.sync.ts';
import type { SourceChooser, SourceReadiness } from '../destinations/source-ips.ts';
import type { WarmupGate, WarmupHold } from '../destinations/warmup.ts';
import type { SendJob, SendOutcome } from './sending.queue.ts';
import type { MailTransport } from './transports/transport.ts';

// The sending worker's warm-up step (issue 38, src/modules/destinations/warmup.ts and source-ips.ts): before an
// attempt, which source IP it leaves from (when DIRECT_SOURCE_IPS lists some) and whether that address's or
// the job's sending domain's day's allowance to the job's destination is used; if so, what its recipients
// become instead of an attempt.

export interface WarmupStep {
  /**
   * A hold: the job waits. Else the address it leaves from (undefined: the machine's choice). Only mail of a
   * warming domain, or with source IPs listed, asks (and may look up its destination first). `readiness`:
   * the address the destinations' shaping chose as the attempt started, and when each other may start.
   */
  decide(
    job: SendJob,
    readiness?: SourceReadiness,
  ): Promise<{ hold: WarmupHold } | { source: SourceIp | undefined }>;
  /** The recipients of a held job: waiting until the hold's end, the attempt not counted. */
  held(job: SendJob, hold: WarmupHold): SendOutcome['updates'];
}

export function createWarmupStep(deps: {
  gate: WarmupGate;
  /** DIRECT_SOURCE_IPS's chooser, when it lists some. */
  sources?: SourceChooser | undefined;
  destinations: DestinationSync;
  transport: Pick<MailTransport, 'mxHostsOf'>;
  clock: Clock;
}): WarmupStep {
  const { gate, sources, destinations, transport, clock } = deps;
  const { shaping } = destinations;

  /** The job's destination; when not known yet, found with the MX lookup its attempt would make anyway. */
  async function destinationOf(job: SendJob, now: number) {
    let lane = shaping.laneOf(job.host);
    if (shaping.providerOf(lane) === undefined && transport.mxHostsOf) {
      const hosts = await transport.mxHostsOf(job.host);
      if (hosts) {
        const learned = shaping.learn(job.host, hosts, now);
        if (learned.isNew) await destinations.learned(job.host, learned.destination, now);
        lane = learned.destination;
      }
    }
    return { key: lane, provider: shaping.providerOf(lane) ?? null };
  }

  /** The choice of address and the domain's admission of one job, after its destination is known. */
  async function admit(
    job: SendJob,
    destination: { key: string; provider: string | null },
    now: number,
    readiness: SourceReadiness | undefined,
  ) {
    const domainWarming = await gate.applies(job.email, now);
    const chosen = sources && (await sources.choose(destination, now, readiness));
    if (chosen && 'until' in chosen) return { hold: chosen };
    const hold = domainWarming ? await gate.admit(job.email, destination, now) : undefined;
    if (hold) {
      // Not sent after all: the address's allowance goes to the next message.
      chosen?.giveBack();
      return { hold };
    }
    return { source: chosen?.source };
  }

  /**
   * Admissions one at a time, in the order the attempts asked (the queue's order: transactional mail first), so
   * a broadcast copy's allowance never overtakes a transactional one's, and an address's allowance given back
   * is there for the next one. Each attempt takes its place in its lane's line before it awaits anything: a
   * destination not known yet is looked up first, and the lookups end in any order. (A line per lane: one
   * domain's slow lookup holds up no other destination's mail.)
   */
  const admitting = new Map<string, Promise<void>>();

  return {
    async decide(job, readiness) {
      const now = clock.now().getTime();
      const turn = admitting.get(job.lane);
      let done!: () => void;
      const mine = new Promise<void>((resolve) => {
        done = resolve;
      });
      admitting.set(job.lane, mine);
      try {
        if (!sources && !(await gate.applies(job.email, now))) return { source: undefined };
        const destination = await destinationOf(job, now);
        await turn;
        return await admit(job, destination, now, readiness);
      } finally {
        done();
        if (admitting.get(job.lane) === mine) admitting.delete(job.lane);
      }
    },
    held: (job, hold) =>
      job.recipients.map((row) => ({
        id: row.id,
        email: job.email,
        address: row.address,
        status: 'delayed',
        counted: false,
        waitReason: 'warmup',
        retryAt: new Date(hold.until).toISOString(),
        response: hold.reason,
        responseCode: null,
        data: {},
        outcomes: row.status === 'delayed' ? [] : ['delayed'],
      })),
  };
}
