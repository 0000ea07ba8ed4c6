import type { Clock } from '../../lib/clock.ts';
import type { DestinationSync } from '../destinations/destinations.sync.ts';
import type { WarmupGate, WarmupHold } from '../destinations/warmup.ts';
import type { SendJob, SendOutcome } from './sending.queue.ts';
import type { MailTransport } from './transports/transport.ts';

// The sending worker's warm-up step (issue 38, src/modules/destinations/warmup.ts): before an attempt, whether
// the job's sending domain has used its day's allowance to the job's destination; if so, what its recipients
// become instead of an attempt.

export interface WarmupStep {
  /** Undefined: the job goes. Only mail of a warming domain asks (and may look up its destination first). */
  holdOf(job: SendJob): Promise<WarmupHold | undefined>;
  /** The recipients of a held job: waiting until the hold's end, the attempt not counted. */
  held(job: SendJob, hold: WarmupHold): SendOutcome['updates'];
}

export function createWarmupStep(deps: {
  gate: WarmupGate;
  destinations: DestinationSync;
  transport: Pick<MailTransport, 'mxHostsOf'>;
  clock: Clock;
}): WarmupStep {
  const { gate, destinations, transport, clock } = deps;
  const { shaping } = destinations;
  return {
    async holdOf(job) {
      const now = clock.now().getTime();
      if (!(await gate.applies(job.email, now))) return undefined;
      // Its destination when not known yet: the MX lookup its attempt would make anyway.
      let lane = shaping.laneOf(job.host);
      if (shaping.providerOf(lane) === undefined && transport.mxHostsOf) {
        const hosts = await transport.mxHostsOf(job.host);
        if (hosts) {
          const learned = shaping.learn(job.host, hosts, now);
          if (learned.isNew) await destinations.learned(job.host, learned.destination, now);
          lane = learned.destination;
        }
      }
      return gate.admit(job.email, { key: lane, provider: shaping.providerOf(lane) ?? null }, now);
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
