// What the paced lanes' index (migration 0047, `email_recipients_paced_ready`) costs an accepted recipient, as
// the row is written (one autocommitted INSERT each, as a send is accepted) and as its outcome takes it out of
// the queue (`ready_seq` cleared), with and without a `paced_host`: relay and capture write none (no entry),
// direct delivery writes it (an entry, as 0044's index had for every row). Alternated, in one process, on a
// queue of `--queued` rows already there.
//
//   node bench/paced-index-cost.ts                     # SQLite (node:sqlite, prepared): CPU µs per row
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test node bench/paced-index-cost.ts
//                                                      # PostgreSQL: WAL bytes and server µs per row (EXPLAIN's)
//
// The rows are written by SQL (scratch-db.ts): the statement's own cost is what is measured, not the email's.
import { DatabaseSync } from 'node:sqlite';
import { parseArgs } from 'node:util';
import { sql } from 'kysely';
import { openScratchDatabase } from './scratch-db.ts';

const { values: args } = parseArgs({
  options: {
    rows: { type: 'string', default: '3000' },
    queued: { type: 'string', default: '20000' },
    rounds: { type: 'string', default: '3' },
  },
});
const rows = Number(args.rows);
const queued = Number(args.queued);
const rounds = Number(args.rounds);
const scratch = await openScratchDatabase('pacedcost');
const { db, engine } = scratch;
let next = 0;
const INSERT = `INSERT INTO email_recipients (id, email_id, project_id, position, type, address, host, status,
    ready_seq, created_at, updated_at, next_attempt_at, paced_host)
  VALUES (?, 'msg_x', 'prj_x', 0, 'to', ?, ?, 'queued', ?, '2026-11-29T00:00:00.000Z',
    '2026-11-29T00:00:00.000Z', '2026-11-29T00:00:00.000Z', ?)`;
const OUTCOME = `UPDATE email_recipients SET ready_seq = NULL, status = 'sent' WHERE id = ?`;
/** PostgreSQL: a statement's WAL bytes and execution time, as EXPLAIN (ANALYZE, WAL) tells them. */
interface Cost {
  bytes: number;
  serverMs: number;
}
const add = (sum: Cost, cost: Cost | void) => {
  if (!cost) return;
  sum.bytes += cost.bytes;
  sum.serverMs += cost.serverMs;
};
/**
 * The two statements (SQLite: prepared once on node:sqlite in this process; PostgreSQL: each run by EXPLAIN
 * (ANALYZE, WAL), which counts its own WAL, where the server's WAL position moves with every other client's).
 */
let write: {
  insert(id: string, n: number, host: string, pacedHost: string | null): Promise<Cost | void> | void;
  outcome(id: string): Promise<Cost | void> | void;
};

/** Inserts `count` queued rows one statement each (paced_host set or not), then clears their ready_seq. */
async function pass(paced: boolean, count: number, measure: boolean) {
  const ids: string[] = [];
  const cpu0 = process.cpuUsage();
  const insertWal = { bytes: 0, serverMs: 0 };
  let start = performance.now();
  for (let i = 0; i < count; i++) {
    const n = ++next;
    const host = `d${n % 50}.test`;
    const id = `rcpt_${n}`;
    ids.push(id);
    add(insertWal, await write.insert(id, n, host, paced ? host : null));
  }
  const insertWall = performance.now() - start;
  const insertCpu = process.cpuUsage(cpu0);
  const cpu1 = process.cpuUsage();
  const outcomeWal = { bytes: 0, serverMs: 0 };
  start = performance.now();
  for (const id of ids) add(outcomeWal, await write.outcome(id));
  const outcomeWall = performance.now() - start;
  const outcomeCpu = process.cpuUsage(cpu1);
  if (!measure) return undefined;
  const perRow = (value: number) => (value / count).toFixed(1);
  // SQLite: this process's CPU (the engine runs in it); PostgreSQL: the server's execution time (EXPLAIN's).
  const cpu = (usage: NodeJS.CpuUsage, cost: Cost) =>
    perRow(engine === 'sqlite' ? usage.user + usage.system : cost.serverMs * 1000);
  return {
    insert: {
      cpu: cpu(insertCpu, insertWal),
      wall: perRow(insertWall * 1000),
      wal: engine === 'postgres' ? perRow(insertWal.bytes) : '-',
    },
    outcome: {
      cpu: cpu(outcomeCpu, outcomeWal),
      wall: perRow(outcomeWall * 1000),
      wal: engine === 'postgres' ? perRow(outcomeWal.bytes) : '-',
    },
  };
}

try {
  if (engine === 'sqlite') {
    const sqlite = new DatabaseSync(scratch.file!);
    sqlite.exec('PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 5000; PRAGMA synchronous = NORMAL;');
    sqlite.exec('PRAGMA foreign_keys = OFF;');
    const insert = sqlite.prepare(INSERT);
    const outcome = sqlite.prepare(OUTCOME);
    write = {
      insert: (id, n, host, pacedHost) => void insert.run(id, `r${n}@${host}`, host, n, pacedHost),
      outcome: (id) => void outcome.run(id),
    };
  } else {
    const numbered = (text: string) => {
      let i = 0;
      return text.replace(/\?/g, () => `$${++i}`);
    };
    const run = async (text: string, parameters: unknown[]): Promise<Cost> => {
      const { rows } = await db.executeQuery<{ 'QUERY PLAN': unknown }>({
        sql: `EXPLAIN (ANALYZE, WAL, FORMAT JSON) ${text}`,
        parameters,
        query: { kind: 'RawNode' } as never,
        queryId: { queryId: 'x' } as never,
      });
      const raw = rows[0]!['QUERY PLAN'];
      const [plan] = (typeof raw === 'string' ? JSON.parse(raw) : raw) as Array<{
        Plan: { 'WAL Bytes': number };
        'Execution Time': number;
      }>;
      return { bytes: plan!.Plan['WAL Bytes'], serverMs: plan!['Execution Time'] };
    };
    write = {
      insert: (id, n, host, pacedHost) => run(numbered(INSERT), [id, `r${n}@${host}`, host, n, pacedHost]),
      outcome: (id) => run(numbered(OUTCOME), [id]),
    };
  }
  // The queue already there: rows of both kinds (they stay queued).
  for (let i = 0; i < queued; i += 1000) {
    await db.transaction().execute(async (trx) => {
      for (let j = 0; j < 1000; j++) {
        const n = ++next;
        const host = `d${n % 50}.test`;
        await sql`INSERT INTO email_recipients (id, email_id, project_id, position, type, address, host, status,
            ready_seq, created_at, updated_at, paced_host)
          VALUES (${`rcpt_${n}`}, 'msg_x', 'prj_x', 0, 'to', ${`r${n}@${host}`}, ${host}, 'queued', ${n},
            '2026-11-29T00:00:00.000Z', '2026-11-29T00:00:00.000Z', ${n % 2 ? host : null})`.execute(trx);
      }
    });
  }
  await pass(false, rows, false);
  await pass(true, rows, false);
  console.log(
    `${engine}: ${rows} rows per pass, one autocommitted statement each, behind ${queued} queued rows; per row:`,
  );
  const cpu = engine === 'sqlite' ? '    cpu µs' : ' server µs';
  console.log(`round  paced_host  INSERT${cpu}  wall µs  WAL B   outcome${cpu}  wall µs  WAL B`);
  for (let round = 1; round <= rounds; round++) {
    for (const paced of round % 2 ? [false, true] : [true, false]) {
      const result = (await pass(paced, rows, true))!;
      console.log(
        `${String(round).padEnd(6)} ${(paced ? 'set' : 'null').padEnd(11)} ${result.insert.cpu.padStart(13)} ${result.insert.wall.padStart(8)} ${result.insert.wal.padStart(6)}   ${result.outcome.cpu.padStart(14)} ${result.outcome.wall.padStart(8)} ${result.outcome.wal.padStart(6)}`,
      );
    }
  }
} finally {
  await scratch.remove();
}
