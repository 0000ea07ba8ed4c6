import { Worker } from 'node:worker_threads';

// SQLite copies its write-ahead log into the database file at checkpoints, and fsyncs it (synchronous=NORMAL
// syncs nothing else). By default the connection that commits past 1,000 pages of log runs the checkpoint
// itself, inside that commit: on the event loop, where a 256 KiB insert then took up to 310 ms on the 2-vCPU VM
// instead of 0.5 ms (p99 48–67 ms against 14–28 ms with checkpoints elsewhere, 640 inserts of a message's
// pieces). A process that opens the database for serving turns that off and checkpoints from a thread of its
// own, on a connection of its own, every CHECKPOINT_INTERVAL_MS: PASSIVE checkpoints take no lock writers or
// readers wait for, and once one has copied the whole log, the next commit starts the log over.

/** How often the thread checkpoints: the log grows by what the process writes in this long, at most. */
export const CHECKPOINT_INTERVAL_MS = 100;

export interface BackgroundCheckpoints {
  /** Ends the thread, after closing its connection. */
  stop(): Promise<void>;
}

export function startBackgroundCheckpoints(file: string, busyTimeoutMs: number): BackgroundCheckpoints {
  const worker = new Worker(new URL('./sqlite-checkpoint-worker.ts', import.meta.url), {
    workerData: { file, busyTimeoutMs, intervalMs: CHECKPOINT_INTERVAL_MS },
  });
  // The process may end without stopping it (the connection's own close is what matters).
  worker.unref();
  const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
  let stopping: Promise<void> | undefined;
  return {
    stop: () =>
      (stopping ??= (async () => {
        // Held while it stops: a process with nothing else left to do waits for the thread's exit.
        worker.ref();
        worker.postMessage('stop');
        await exited;
      })()),
  };
}
