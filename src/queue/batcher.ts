export interface BatcherOptions<T> {
  /** Writes one batch; it handles its own errors (a rejection is treated as handled and dropped). */
  write(items: T[]): Promise<void>;
  /** The most items one write takes. */
  maxBatch: number;
  /**
   * A write starts at least this long after the previous one started, so that under load each write takes
   * what a few milliseconds brought (with an in-process database, a write ends too quickly for the next
   * batch to gather by itself). The first item after a quiet spell is written at once.
   */
  minIntervalMs?: number;
  /** After each write: room was made. */
  onWritten?(): void;
}

export interface Batcher<T> {
  add(item: T): void;
  /** Items added and not yet written (including the batch being written). */
  readonly pending: number;
  /** Resolves once everything added so far is written. */
  drain(): Promise<void>;
  /**
   * Starts the write of the items waiting now, without waiting out `minIntervalMs`; false (and nothing
   * done) when none wait or a write is under way.
   */
  writeNow(): boolean;
}

/**
 * Group commit: items are written in batches, one write at a time. An item added while the pipe is idle
 * is written at the end of the current turn of the event loop (with whatever else that turn added), so at
 * low load nothing waits; under load, the items that arrive during one write (and at least `minIntervalMs`
 * after its start) go together in the next.
 */
export function createBatcher<T>(options: BatcherOptions<T>): Batcher<T> {
  let queue: T[] = [];
  let writing = 0;
  /** The scheduled write, while one is: a timer, or an immediate when no wait is due. */
  let scheduled: { timer: NodeJS.Timeout } | { immediate: NodeJS.Immediate } | undefined;
  let lastWriteAt = -Infinity;
  const minIntervalMs = options.minIntervalMs ?? 0;
  let idle: Promise<void> = Promise.resolve();
  let settleIdle: (() => void) | undefined;

  function schedule(): void {
    if (scheduled || writing > 0 || queue.length === 0) return;
    const run = () => {
      scheduled = undefined;
      void flush();
    };
    const wait = lastWriteAt + minIntervalMs - performance.now();
    scheduled = wait > 0 ? { timer: setTimeout(run, wait) } : { immediate: setImmediate(run) };
  }

  async function flush(): Promise<void> {
    const batch = queue.slice(0, options.maxBatch);
    queue = queue.slice(batch.length);
    writing = batch.length;
    lastWriteAt = performance.now();
    try {
      await options.write(batch);
    } catch {
      // write() reports its own failures.
    } finally {
      writing = 0;
      options.onWritten?.();
      if (queue.length > 0) {
        schedule();
      } else {
        settleIdle?.();
        settleIdle = undefined;
      }
    }
  }

  return {
    add(item) {
      if (queue.length === 0 && writing === 0) {
        idle = new Promise((resolve) => (settleIdle = resolve));
      }
      queue.push(item);
      schedule();
    },
    get pending() {
      return queue.length + writing;
    },
    drain: () => idle,
    writeNow() {
      if (writing > 0 || queue.length === 0) return false;
      if (scheduled && 'timer' in scheduled) clearTimeout(scheduled.timer);
      else if (scheduled) clearImmediate(scheduled.immediate);
      scheduled = undefined;
      void flush();
      return true;
    },
  };
}
