// SIGTERM and SIGINT: the one clean stop of a process, bounded by a grace period.

export interface ShutdownLogger {
  info(object: object | string, message?: string): void;
  warn(object: object | string, message?: string): void;
  error(object: object | string, message?: string): void;
}

/**
 * A second copy of the first signal this soon after it is the same stop: Ctrl-C signals the whole process
 * group, and `npm start` passes its own copy on to the server as well (test/npm-start.test.ts).
 */
const SAME_SIGNAL_MS = 1000;

/**
 * The first SIGTERM or SIGINT runs `close` and exits 0 when it is done; a second signal, or a `close` that
 * outlasts `graceMs`, exits 1 at once.
 */
export function exitOnSignals(log: ShutdownLogger, graceMs: number, close: () => Promise<void>): void {
  let first: { signal: NodeJS.Signals; at: number } | undefined;
  const stop = (signal: NodeJS.Signals) => {
    if (first) {
      if (signal === first.signal && performance.now() - first.at < SAME_SIGNAL_MS) return;
      log.warn({ signal }, `Received ${signal} again; exiting without waiting`);
      process.exit(1);
    }
    first = { signal, at: performance.now() };
    log.info({ signal }, `Received ${signal}; finishing work in flight, then exiting`);
    setTimeout(() => {
      log.error(`Work in flight did not finish within ${graceMs} ms; exiting`);
      process.exit(1);
    }, graceMs).unref();
    close().then(
      () => {
        log.info('Stopped');
        // Exit explicitly: nothing is left to wait for, and a stray handle must not keep a stopped process alive.
        process.exit(0);
      },
      (error: unknown) => {
        log.error({ err: error }, 'Shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
