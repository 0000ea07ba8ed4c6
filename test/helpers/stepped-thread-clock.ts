// The parse pool's clocks, the test's (report-reader.test.ts, received-parser.test.ts): a test of the CPU budget
// then gives the same verdict however loaded the machine is. A real message cannot be made to need the whole
// budget (the parser's caps stop it first), so the thread's CPU clock shows 10 s more from the moment the message
// is handed over, and stands still otherwise; the wall clock stands still throughout, so no read is stopped as
// starved, however slowly the machine runs it.

/** The CPU time the thread's clock jumps by once the message is handed over: far past any test's budget. */
const STEP_MS = 10_000;

/** Clocks for the pool (`threadCpuMs`, `wallMs`), and `step`, which makes the CPU clock jump at a hand-over. */
export function steppedThreadClock() {
  let cpuMs = 0;
  let clockRead: (() => void) | undefined;
  return {
    clocks: {
      threadCpuMs: async () => {
        const shown = cpuMs;
        clockRead?.();
        return shown;
      },
      wallMs: () => 0,
    },
    /**
     * Starts `read` and answers what it answers; the pool reads the thread's clock as it hands the message over,
     * and from that read on the clock shows 10 s more.
     */
    async step<T>(read: () => Promise<T>): Promise<T> {
      const handedOver = new Promise<void>((resolve) => (clockRead = resolve));
      const reading = read();
      await handedOver;
      clockRead = undefined;
      cpuMs += STEP_MS;
      return reading;
    },
  };
}
