// Preloaded into a Postwire process by `bench:receiving --statements <file>` (NODE_OPTIONS=--import) or
// `bench:send --statements <file>`: counts node:sqlite statement calls, and PostgreSQL queries (each one round
// trip), and their wall time and the rows they returned or changed by SQL text, and writes the tally, slowest first, to STATEMENT_TALLY_FILE when
// the process exits. Wall time on the calling thread: a thread that shares its CPU
// is preempted inside some of them, so read the times as upper bounds and the counts as exact.
import { writeFileSync } from 'node:fs';
import { StatementSync } from 'node:sqlite';
import pg from 'pg';

const tally = new Map<string, { count: number; ns: bigint; rows: number }>();
const count = (text: string, started: bigint, rows = 0) => {
  const sql = text.replace(/\s+/g, ' ').slice(0, 160);
  const entry = tally.get(sql) ?? { count: 0, ns: 0n, rows: 0 };
  entry.count += 1;
  entry.ns += process.hrtime.bigint() - started;
  entry.rows += rows;
  tally.set(sql, entry);
};
type Method = 'all' | 'run' | 'get' | 'iterate';
/** The rows a statement returned (node:sqlite's all, pg's rows) or changed (run's changes, pg's rowCount). */
function rowsOf(result: unknown): number {
  if (Array.isArray(result)) return result.length;
  const answer = result as { rowCount?: number | null; changes?: number | bigint } | undefined;
  return Number(answer?.rowCount ?? answer?.changes ?? 0);
}
const prototype = StatementSync.prototype as unknown as Record<Method, (...args: unknown[]) => unknown>;
for (const method of ['all', 'run', 'get', 'iterate'] as const) {
  const original = prototype[method];
  prototype[method] = function (this: StatementSync, ...args: unknown[]) {
    const started = process.hrtime.bigint();
    let result: unknown;
    try {
      return (result = original.apply(this, args));
    } finally {
      count(this.sourceSQL, started, rowsOf(result));
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
      (answer: unknown) => count(text, started, rowsOf(answer)),
      () => count(text, started),
    );
  else count(text, started);
  return result;
};

// A bench marks its phases (globalThis.statementTallyMark, bench/shaping.ts): the statements made since the
// previous mark are written to `<file>.<phase>` as well.
const phases: Array<[string, Map<string, { count: number; ns: bigint; rows: number }>]> = [];
let lastMark = new Map<string, { count: number; ns: bigint; rows: number }>();
(globalThis as { statementTallyMark?: (phase: string) => void }).statementTallyMark = (phase) => {
  const since = new Map<string, { count: number; ns: bigint; rows: number }>();
  for (const [sql, entry] of tally) {
    const before = lastMark.get(sql) ?? { count: 0, ns: 0n, rows: 0 };
    if (entry.count > before.count)
      since.set(sql, {
        count: entry.count - before.count,
        ns: entry.ns - before.ns,
        rows: entry.rows - before.rows,
      });
  }
  phases.push([phase, since]);
  lastMark = new Map([...tally].map(([sql, entry]) => [sql, { ...entry }]));
};

process.on('exit', () => {
  const file = process.env.STATEMENT_TALLY_FILE;
  if (!file) return;
  for (const [phase, since] of phases) write(`${file}.${phase}`, since);
  write(file, tally);
});

function write(file: string, tally: Map<string, { count: number; ns: bigint; rows: number }>): void {
  const lines = [...tally]
    .sort((a, b) => Number(b[1].ns - a[1].ns))
    .map(
      ([sql, { count, ns, rows }]) =>
        `${String(count).padStart(7)} ${(Number(ns) / 1e6).toFixed(1).padStart(9)} ms ${String(rows).padStart(8)}  ${sql}`,
    );
  writeFileSync(file, `  calls   wall time     rows  statement\n${lines.join('\n')}\n`);
}
