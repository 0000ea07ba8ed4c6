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
  /** Ends the sleep under way, if any. */
  let sleeper: (() => void) | undefined;
  /**
   * The sleeps' timer and when it fires. A wake-up leaves it armed, and a sleep that would end later reuses
   * it: it fires early, and that only runs one more round. A busy worker is woken by every finished job, and a
   * timer cleared and set again for each (a new timer list for each new duration) cost more than the round.
   */
  let timer: NodeJS.Timeout | undefined;
  let timerDue = Infinity;
  let listener: Listener | undefined;
  let relisten: NodeJS.Timeout | undefined;

  function endSleep(): void {
    const resolve = sleeper;
    sleeper = undefined;
    resolve?.();
  }

  function wake(): void {
    wakePending = true;
    endSleep();
  }

  function onTimer(): void {
    timer = undefined;
    timerDue = Infinity;
    endSleep();
  }

  function sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      sleeper = resolve;
      const due = performance.now() + ms;
      if (timer !== undefined && timerDue <= due) return;
      clearTimeout(timer);
      timerDue = due;
      timer = setTimeout(onTimer, ms);
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
      clearTimeout(timer);
      timer = undefined;
      timerDue = Infinity;
    },
  };
}
