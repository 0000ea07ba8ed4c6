import type { Listener } from '../db/connection.ts';

export interface WorkLoopOptions {
  /** Does what is due; returns how long to sleep unless woken. Rounds never overlap. */
  round(): Promise<number>;
  /** A round threw (the database is unreachable, say): the loop sleeps `errorPauseMs` before the next. */
  onRoundError(error: unknown): void;
  errorPauseMs: number;
  /**
   * Opens a wake-up channel from other processes (PostgreSQL LISTEN) whose notifications call `wake`;
   * `onLost` reports its loss. While there is none, the loop reopens it every `relistenMs` and the rounds'
   * sleeps (their poll) are what find other processes' work.
   */
  listen?: ((onLost: (error: Error) => void) => Promise<Listener>) | undefined;
  onListenProblem?(error: unknown, lost: boolean): void;
  relistenMs?: number;
}

export interface WorkLoop {
  start(): Promise<void>;
  /** Ends the loop after the round under way (a sleeping loop ends at once) and closes the listener. */
  stop(): Promise<void>;
  /** Runs a round as soon as the one under way ends, or now if the loop is asleep. */
  wake(): void;
}

/**
 * A worker's main loop: rounds of work, each followed by a sleep that a wake-up (new work in this process,
 * a NOTIFY from another, a finished job) cuts short. A wake-up during a round makes the next round start
 * without sleeping, so none is lost.
 */
export function createWorkLoop(options: WorkLoopOptions): WorkLoop {
  const relistenMs = options.relistenMs ?? 5000;
  let running = false;
  let loop: Promise<void> | undefined;
  let wakePending = false;
  let sleeping: { timer: NodeJS.Timeout; resolve: () => void } | undefined;
  let listener: Listener | undefined;
  let relisten: NodeJS.Timeout | undefined;

  function wake(): void {
    wakePending = true;
    if (sleeping) {
      clearTimeout(sleeping.timer);
      sleeping.resolve();
      sleeping = undefined;
    }
  }

  function sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      sleeping = { timer: setTimeout(resolve, ms), resolve };
    });
  }

  async function run(): Promise<void> {
    while (running) {
      wakePending = false;
      let pause: number;
      let failed = false;
      try {
        pause = await options.round();
      } catch (error) {
        // Sleep instead of retrying at once (only a wake-up during the sleep, such as stop(), ends it early).
        failed = true;
        pause = options.errorPauseMs;
        options.onRoundError(error);
      }
      if (!running) break;
      if (wakePending && !failed) continue;
      await sleep(pause);
      sleeping = undefined;
    }
  }

  async function openListener(): Promise<void> {
    if (!options.listen || !running) return;
    try {
      listener = await options.listen((error) => {
        listener = undefined;
        options.onListenProblem?.(error, true);
        scheduleRelisten();
      });
      if (!running) await listener.close();
    } catch (error) {
      options.onListenProblem?.(error, false);
      scheduleRelisten();
    }
  }

  function scheduleRelisten(): void {
    if (!running || relisten) return;
    relisten = setTimeout(() => {
      relisten = undefined;
      void openListener();
    }, relistenMs);
    relisten.unref();
  }

  return {
    wake,
    async start() {
      if (running) return;
      running = true;
      await openListener();
      loop = run();
    },
    async stop() {
      if (!running) return;
      running = false;
      clearTimeout(relisten);
      relisten = undefined;
      await listener?.close();
      listener = undefined;
      wake();
      await loop;
    },
  };
}
