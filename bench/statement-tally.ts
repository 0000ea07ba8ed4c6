// Preloaded into a Postwire process by `bench:receiving --statements <file>` (NODE_OPTIONS=--import) or
// `bench:send --statements <file>`: counts node:sqlite statement calls, and PostgreSQL queries (each one round
// trip), and their wall time by SQL text, and writes the tally, slowest first, to STATEMENT_TALLY_FILE when
// the process exits. Wall time on the calling thread: a thread that shares its CPU
// is preempted inside some of them, so read the times as upper bounds and the counts as exact.
import { writeFileSync } from 'node:fs';
import { StatementSync } from 'node:sqlite';
import pg from 'pg';

const tally = new Map<string, { count: number; ns: bigint }>();
const count = (text: string, started: bigint) => {
  const sql = text.replace(/\s+/g, ' ').slice(0, 160);
  const entry = tally.get(sql) ?? { count: 0, ns: 0n };
  entry.count += 1;
  entry.ns += process.hrtime.bigint() - started;
  tally.set(sql, entry);
};
type Method = 'all' | 'run' | 'get' | 'iterate';
const prototype = StatementSync.prototype as unknown as Record<Method, (...args: unknown[]) => unknown>;
for (const method of ['all', 'run', 'get', 'iterate'] as const) {
  const original = prototype[method];
  prototype[method] = function (this: StatementSync, ...args: unknown[]) {
    const started = process.hrtime.bigint();
    try {
      return original.apply(this, args);
    } finally {
      count(this.sourceSQL, started);
    }
  };
}

// PostgreSQL: wall time from the query's call to its answer, waiting for the connection's turn included.
type Query = (...args: unknown[]) => unknown;
const clientPrototype = pg.Client.prototype as unknown as { query: Query };
const query = clientPrototype.query;
clientPrototype.query = function (this: pg.Client, ...args: unknown[]) {
  const started = process.hrtime.bigint();
  const first = args[0] as string | { text?: string };
  const text = typeof first === 'string' ? first : (first?.text ?? '');
  const result = query.apply(this, args);
  if (result instanceof Promise)
    void result.then(
      () => count(text, started),
      () => count(text, started),
    );
  else count(text, started);
  return result;
};

process.on('exit', () => {
  const file = process.env.STATEMENT_TALLY_FILE;
  if (!file) return;
  const lines = [...tally]
    .sort((a, b) => Number(b[1].ns - a[1].ns))
    .map(
      ([sql, { count, ns }]) =>
        `${String(count).padStart(7)} ${(Number(ns) / 1e6).toFixed(1).padStart(9)} ms  ${sql}`,
    );
  writeFileSync(file, `  calls   wall time  statement\n${lines.join('\n')}\n`);
});
