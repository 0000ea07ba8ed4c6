import type { QueueWorker } from './runtime.ts';

/** The queues a process can work, as /metrics labels them. */
export const QUEUE_NAMES = [
  'sending',
  'deliveries',
  'inbound',
  'domain_checks',
  'broadcasts',
  'contact_imports',
] as const;
export type QueueName = (typeof QUEUE_NAMES)[number];

export interface RunningQueueWorker {
  queue: QueueName;
  worker: Pick<QueueWorker, 'attemptsInFlight' | 'lastHeartbeatAt'>;
}

/**
 * The queue workers this process runs, as /readyz and /metrics see them: the workers add themselves once
 * started and leave when stopped, so a process without workers (`serve --no-worker`) has none to check.
 */
export interface RunningQueueWorkers {
  add(entry: RunningQueueWorker): void;
  remove(worker: object): void;
  list(): readonly RunningQueueWorker[];
}

export function createRunningQueueWorkers(): RunningQueueWorkers {
  let entries: RunningQueueWorker[] = [];
  return {
    add(entry) {
      entries = [...entries, entry];
    },
    remove(worker) {
      entries = entries.filter((entry) => entry.worker !== worker);
    },
    list: () => entries,
  };
}
