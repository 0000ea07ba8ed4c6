import { isMainThread } from 'node:worker_threads';

// Loaded into a server process under test (`--import`, `turnCpuOptions`): how much of the event loop thread's
// own CPU each turn of its loop took. A turn that computes for 300 ms holds every request that waits on it for
// 300 ms, however idle or busy the machine is, while the wall-clock latency a probe sees also counts the time
// the thread waited for a core. So a test can hold the server to "no long turn" on a shared machine: waiting
// does not count, only the thread's own work (and its garbage collection) does.

/** The clock's tick: a turn of the loop runs the timers due once, so two ticks bracket one turn's work. */
const TICK_MS = 2;
/** Turns over this much CPU are reported, one JSON line each on standard output. */
const REPORTED_OVER_MS = 20;

if (isMainThread) {
  let last = process.threadCpuUsage();
  setInterval(() => {
    const now = process.threadCpuUsage();
    const turnCpuMs = (now.user - last.user + (now.system - last.system)) / 1000;
    last = now;
    if (turnCpuMs > REPORTED_OVER_MS)
      process.stdout.write(`${JSON.stringify({ msg: 'turn cpu', turnCpuMs })}\n`);
  }, TICK_MS).unref();
}
