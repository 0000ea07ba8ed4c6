// What the paced lanes' index (migration 0047, `email_recipients_paced_ready`) costs an accepted recipient, as
// the row is written (one autocommitted INSERT each, as a send is accepted) and as its outcome takes it out of
// the queue (`ready_seq` cleared), with and without a `paced_host`: relay and capture write none (no entry),
// direct delivery writes it (an entry, as 0044's index had for every row). Alternated, in one process, on a
// queue of `--queued` rows already there.
//
//   node bench/paced-index-cost.ts                     # SQLite (node:sqlite, prepared): CPU µs per row
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test node bench/paced-index-cost.ts
//                                                      # PostgreSQL: WAL bytes per row, and wall µs per row
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
const walLsn = async () =>
  (await sql<{ lsn: string }>`SELECT pg_current_wal_lsn()::text AS lsn`.execute(db)).rows[0]!.lsn;
const walBytes = async (from: string, to: string) =>
  Number(
    (
      await sql<{
        bytes: string;
      }>`SELECT pg_wal_lsn_diff(${to}::pg_lsn, ${from}::pg_lsn)::text AS bytes`.execute(db)
    ).rows[0]!.bytes,
  );

/** Inserts `count` queued rows one statement each (paced_host set or not), then clears their ready_seq. */
async function pass(paced: boolean, count: number, measure: boolean) {
  const ids: string[] = [];
  const cpu0 = process.cpuUsage();
  const wal0 = engine === 'postgres' && measure ? await walLsn() : '';
  let start = performance.now();
  for (let i = 0; i < count; i++) {
    const n = ++next;
    const host = `d${n % 50}.test`;
    const id = `rcpt_${n}`;
    ids.push(id);
    await write.insert(id, n, host, paced ? host : null);
  }
  const insertWall = performance.now() - start;
  const insertCpu = process.cpuUsage(cpu0);
  const wal1 = engine === 'postgres' && measure ? await walLsn() : '';
  const cpu1 = process.cpuUsage();
  start = performance.now();
  for (const id of ids) {
    await write.outcome(id);
  }
  const outcomeWall = performance.now() - start;
  const outcomeCpu = process.cpuUsage(cpu1);
  const wal2 = engine === 'postgres' && measure ? await walLsn() : '';
  if (!measure) return undefined;
  const perRow = (value: number) => (value / count).toFixed(1);
  return {
    insert: {
      cpu: perRow(insertCpu.user + insertCpu.system),
      wall: perRow(insertWall * 1000),
      wal: engine === 'postgres' ? perRow(await walBytes(wal0, wal1)) : '-',
    },
    outcome: {
      cpu: perRow(outcomeCpu.user + outcomeCpu.system),
      wall: perRow(outcomeWall * 1000),
      wal: engine === 'postgres' ? perRow(await walBytes(wal1, wal2)) : '-',
    },
  };
}

const INSERT = `INSERT INTO email_recipients (id, email_id, project_id, position, type, address, host, status,
    ready_seq, created_at, updated_at, next_attempt_at, paced_host)
  VALUES (?, 'msg_x', 'prj_x', 0, 'to', ?, ?, 'queued', ?, '2026-11-29T00:00:00.000Z',
    '2026-11-29T00:00:00.000Z', '2026-11-29T00:00:00.000Z', ?)`;
const OUTCOME = `UPDATE email_recipients SET ready_seq = NULL, status = 'sent' WHERE id = ?`;
/** The two statements, prepared once (SQLite: node:sqlite in this process; PostgreSQL: through the pool). */
let write: {
  insert(id: string, n: number, host: string, pacedHost: string | null): Promise<void> | void;
  outcome(id: string): Promise<void> | void;
};

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
    const run = (text: string, parameters: unknown[]) =>
      db.executeQuery({
        sql: text,
        parameters,
        query: { kind: 'RawNode' } as never,
        queryId: { queryId: 'x' } as never,
      });
    write = {
      insert: async (id, n, host, pacedHost) => {
        await run(numbered(INSERT), [id, `r${n}@${host}`, host, n, pacedHost]);
      },
      outcome: async (id) => {
        await run(numbered(OUTCOME), [id]);
      },
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
  console.log('round  paced_host  INSERT cpu µs  wall µs  WAL B   outcome cpu µs  wall µs  WAL B');
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
