// Bulk seeding for the benchmarks: the database makes the rows itself (INSERT … SELECT over a series of
// integers: generate_series on PostgreSQL, a recursive CTE on SQLite): a million emails with their events,
// deliveries and attempts (8 million rows) take 2–5 minutes on the shared VM, where a million events sent
// from here in inserts of 1,000 rows took more than 10 on PostgreSQL.
//
// The rows are what the API writes: every NOT NULL column filled, JSON where the API stores JSON, ISO
// timestamps, and ids in our id scheme (src/lib/ids.ts) made at the row's own time, so keyset pagination and
// retention (both ranges on time-ordered ids) see them exactly as they would see real ones.
import { existsSync, statSync } from 'node:fs';
import { type Kysely, type RawBuilder, sql } from 'kysely';
import type { Engine } from '../src/db/connection.ts';
import type { Database } from '../src/db/schema.ts';
import type { IdPrefix } from '../src/lib/ids.ts';

export interface SeedTarget {
  db: Kysely<Database>;
  engine: Engine;
}

/** A time span (ms since the epoch) that `count` rows are spread evenly over, oldest first. */
export interface Spread {
  count: number;
  fromMs: number;
  spanMs: number;
  /**
   * Distinct per seeding call (a small integer): ids carry it above the row's index, so two calls whose rows
   * share a millisecond still make different ids.
   */
  batch: number;
}

// TypeID's alphabet (Crockford's base32, lowercase).
const BASE32 = '0123456789abcdefghjkmnpqrstvwxyz';
/** Serials are written as 12 decimal digits; a call's `batch` goes above its rows' indexes. */
const SERIAL_DIGITS = 12;
const BATCH_STRIDE = 10 ** 9;

/** The series' current integer (0 … count − 1), in the computed values and in the columns alike. */
const i = sql.raw('i');
const int = (value: number) => sql.raw(String(Math.trunc(value)));
/** A string parameter, typed: PostgreSQL cannot infer the type of a parameter concatenated with `||`. */
const text = (value: string) => sql`CAST(${value} AS TEXT)`;
/** A value computed once per row (see insertSeries), by name. */
const computed = (name: string) => sql.ref(name);

/** `value` (a non-negative BIGINT expression) as `chars` base32 digits, most significant first. */
function base32(value: RawBuilder<unknown>, chars: number): RawBuilder<string> {
  const digits = Array.from(
    { length: chars },
    (_, index) =>
      sql`substr(${sql.lit(BASE32)}, CAST(((${value} >> ${int(5 * (chars - 1 - index))}) & 31) AS INTEGER) + 1, 1)`,
  );
  return sql<string>`(${sql.join(digits, sql` || `)})`;
}

/**
 * A `prefix_…` id made at `ms` (a BIGINT expression) with `serial` in its random bits: a UUIDv7 as TypeID
 * writes it. The 48-bit time is exactly the first 10 characters; then version 7 and rand_a 0 (`e00`), the
 * variant bits (`8`), and rand_b, here the serial in decimal: digits are base32 digits that sort the same,
 * and cost one conversion instead of twelve. Ids sort by time, then by serial.
 */
function idAt(
  target: SeedTarget,
  prefix: IdPrefix,
  ms: RawBuilder<unknown>,
  serial: RawBuilder<unknown>,
): RawBuilder<string> {
  const zeros = sql.lit('0'.repeat(SERIAL_DIGITS));
  const digits =
    target.engine === 'postgres'
      ? sql`right(${zeros} || ${serial}, ${int(SERIAL_DIGITS)})`
      : sql`substr(${zeros} || ${serial}, ${int(-SERIAL_DIGITS)})`;
  return sql<string>`(${sql.lit(`${prefix}_`)} || ${base32(ms, 10)} || 'e008' || ${digits})`;
}

/** ISO 8601 UTC with milliseconds, as the API stores timestamps, of `ms` (a BIGINT expression). */
function isoAt(target: SeedTarget, ms: RawBuilder<unknown>): RawBuilder<string> {
  return target.engine === 'postgres'
    ? sql<string>`to_char(to_timestamp(${ms} / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`
    : sql<string>`strftime('%Y-%m-%dT%H:%M:%fZ', ${ms} / 1000.0, 'unixepoch')`;
}

/** The time of the series' row in `spread`, plus `offsetMs`, as a BIGINT expression. */
function msOf(spread: Spread, offsetMs = 0): RawBuilder<unknown> {
  const stepMicros = spread.count > 0 ? (spread.spanMs * 1000) / spread.count : 0;
  // Integer arithmetic on both engines: the first row's time, plus the index times the step.
  return sql`(CAST(${int(spread.fromMs + offsetMs)} AS BIGINT) + CAST(${i} AS BIGINT) * ${int(stepMicros)} / 1000)`;
}

/** The series' row's serial in `spread`: its index times `perRow`, plus `offset`, above the batch. */
function serialOf(spread: Spread, perRow = 1, offset = 0): RawBuilder<unknown> {
  if (
    perRow * spread.count + offset >= BATCH_STRIDE ||
    (spread.batch + 1) * BATCH_STRIDE > 10 ** SERIAL_DIGITS
  ) {
    throw new Error('the serials would not fit their 12 digits: fewer rows or a smaller batch');
  }
  return sql`(CAST(${int(spread.batch * BATCH_STRIDE + offset)} AS BIGINT) + CAST(${i} AS BIGINT) * ${int(perRow)})`;
}

type Value = RawBuilder<unknown> | string | number | null;

/**
 * INSERT INTO `table` one row per integer i = 0 … count − 1. `once` are the costly expressions of i (ids,
 * timestamps), evaluated once per row in a subquery the planner may not fold into the outer query (the
 * OFFSET), and named in `columns` with `computed(name)`; the columns may use `i` too.
 */
async function insertSeries(
  target: SeedTarget,
  table: keyof Database,
  count: number,
  once: Record<string, RawBuilder<unknown>>,
  columns: Record<string, Value>,
): Promise<void> {
  if (count <= 0) return;
  const names = sql.join(Object.keys(columns).map((name) => sql.id(name)));
  const values = sql.join(
    Object.values(columns).map((value) => {
      if (value === null) return sql`NULL`;
      if (typeof value === 'number') return int(value);
      return typeof value === 'string' ? text(value) : value;
    }),
  );
  const perRow = sql.join([
    i,
    ...Object.entries(once).map(([name, value]) => sql`${value} AS ${sql.id(name)}`),
  ]);
  const last = int(count - 1);
  const rows =
    target.engine === 'postgres'
      ? sql`SELECT ${perRow} FROM generate_series(0, ${last}) AS series(i) OFFSET 0`
      : sql`WITH RECURSIVE series(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM series WHERE i < ${last})
          SELECT ${perRow} FROM series LIMIT -1 OFFSET 0`;
  await sql`INSERT INTO ${sql.table(table)} (${names}) SELECT ${values} FROM (${rows}) AS seed_row`.execute(
    target.db,
  );
}

export interface EmailHistory extends Spread {
  projectId: string;
  /** The webhook subscribed to the emails' events: one delivery, and one attempt, per event. */
  webhookId: string;
}

/**
 * One email in 50 bounced, one in 1,000 complained of (a rare status), the rest delivered; one delivery in
 * 100 failed.
 */
const BOUNCED_EVERY = 50;
const COMPLAINED_EVERY = 1000;
const FAILED_DELIVERY_EVERY = 100;
/** Each email's events: `email.sent` as it is accepted, then how it ended a second later. */
const EVENTS_PER_EMAIL = 2;
const SETTLED_AFTER_MS = 1000;

/**
 * A project's sent mail: `count` emails (one recipient each), and per email an `email.sent` and an
 * `email.delivered`, `email.bounced` or `email.complained` event, each delivered once to `webhookId` with one
 * attempt. Run it inside a transaction (seedInOneTransaction): the statements are one data set.
 */
export async function seedEmails(target: SeedTarget, history: EmailHistory): Promise<void> {
  const { count, projectId } = history;
  const emailId = computed('email_id');
  const created = computed('created');
  const settled = computed('settled');
  const emailOnce = {
    email_id: idAt(target, 'msg', msOf(history), serialOf(history)),
    created: isoAt(target, msOf(history)),
    settled: isoAt(target, msOf(history, SETTLED_AFTER_MS)),
  };
  const recipient = sql`('user' || ${i} || '@example.org')`;
  const bounced = sql`(${i} % ${int(BOUNCED_EVERY)} = 7)`;
  const complained = sql`(${i} % ${int(COMPLAINED_EVERY)} = 500)`;
  const status = sql`CASE WHEN ${complained} THEN 'complained' WHEN ${bounced} THEN 'bounced' ELSE 'delivered' END`;

  await insertSeries(target, 'emails', count, emailOnce, {
    id: emailId,
    project_id: projectId,
    from_address: 'Bench <bench@example.com>',
    to_addresses: sql`('["' || ${recipient} || '"]')`,
    cc_addresses: '[]',
    bcc_addresses: '[]',
    reply_to: '[]',
    subject: sql`('Your receipt #' || ${i})`,
    html: sql`('<p>Hello user ' || ${i} || ',</p><p>Thanks for your order. Your receipt number is <b>' || ${i} || '</b>.</p>')`,
    text: sql`('Hello user ' || ${i} || ', thanks for your order. Your receipt number is ' || ${i} || '.')`,
    headers: '{}',
    tags: sql`('{"campaign":"c' || (${i} % 10) || '"}')`,
    template_id: null,
    template_version: null,
    message_id: sql`('<' || ${emailId} || '@example.com>')`,
    status,
    recipient_count: 1,
    scheduled_at: null,
    created_at: created,
    updated_at: settled,
  });
  await insertSeries(
    target,
    'email_recipients',
    count,
    { ...emailOnce, recipient_id: idAt(target, 'rcpt', msOf(history), serialOf(history)) },
    {
      id: computed('recipient_id'),
      email_id: emailId,
      project_id: projectId,
      position: 0,
      type: 'to',
      address: recipient,
      host: 'example.org',
      status,
      attempts: 1,
      ready_seq: null,
      wait_until: null,
      next_attempt_at: null,
      locked_until: null,
      locked_by: null,
      last_attempt_at: created,
      last_response: sql`CASE WHEN ${bounced} THEN '550 5.1.1 No such user' ELSE '250 2.0.0 OK' END`,
      last_response_code: sql`CASE WHEN ${bounced} THEN 550 ELSE 250 END`,
      created_at: created,
      updated_at: settled,
      completed_at: settled,
    },
  );

  const eventData = (extra: string) =>
    sql`('{"email_id":"' || ${emailId} || '","from":"Bench <bench@example.com>","to":["' || ${recipient} || '"],"subject":"Your receipt #' || ${i} || '","tags":{"campaign":"c' || (${i} % 10) || '"},"recipient":"' || ${recipient} || '"' || ${sql.lit(extra)} || '}')`;
  const kinds = [
    { offsetMs: 0, type: sql`'email.sent'`, data: eventData('') },
    {
      offsetMs: SETTLED_AFTER_MS,
      type: sql`CASE WHEN ${complained} THEN 'email.complained' WHEN ${bounced} THEN 'email.bounced' ELSE 'email.delivered' END`,
      data: eventData(''),
    },
  ];
  const eventId = computed('event_id');
  const deliveryId = computed('delivery_id');
  const eventCreated = computed('event_created');
  for (const [k, kind] of kinds.entries()) {
    const eventAt = msOf(history, kind.offsetMs);
    const serial = serialOf(history, EVENTS_PER_EMAIL, k);
    const eventOnce = {
      event_id: idAt(target, 'evt', eventAt, serial),
      delivery_id: idAt(target, 'dlv', eventAt, serial),
      event_created: isoAt(target, eventAt),
    };
    const failed = sql`((${i} * ${int(EVENTS_PER_EMAIL)} + ${int(k)}) % ${int(FAILED_DELIVERY_EVERY)} = 3)`;
    await insertSeries(
      target,
      'events',
      count,
      { ...eventOnce, email_id: emailOnce.email_id },
      {
        id: eventId,
        project_id: projectId,
        type: kind.type,
        data: kind.data,
        created_at: eventCreated,
        email_id: emailId,
      },
    );
    await insertSeries(target, 'deliveries', count, eventOnce, {
      id: deliveryId,
      project_id: projectId,
      event_id: eventId,
      webhook_id: history.webhookId,
      status: sql`CASE WHEN ${failed} THEN 'failed' ELSE 'succeeded' END`,
      attempts: 1,
      next_attempt_at: eventCreated,
      locked_until: null,
      locked_by: null,
      last_attempt_at: eventCreated,
      last_status_code: sql`CASE WHEN ${failed} THEN 500 ELSE 200 END`,
      last_error: sql`CASE WHEN ${failed} THEN 'HTTP 500' ELSE NULL END`,
      created_at: eventCreated,
      updated_at: eventCreated,
      completed_at: eventCreated,
    });
    await insertSeries(
      target,
      'delivery_attempts',
      count,
      { ...eventOnce, attempt_id: idAt(target, 'att', eventAt, serial) },
      {
        id: computed('attempt_id'),
        delivery_id: deliveryId,
        project_id: projectId,
        webhook_id: history.webhookId,
        event_id: eventId,
        attempted_at: eventCreated,
        status_code: sql`CASE WHEN ${failed} THEN 500 ELSE 200 END`,
        duration_ms: sql`(12 + ${i} % 40)`,
        error: sql`CASE WHEN ${failed} THEN 'HTTP 500' ELSE NULL END`,
        response_excerpt: sql`CASE WHEN ${failed} THEN 'Internal Server Error' ELSE 'ok' END`,
      },
    );
  }
}

/**
 * `count` `email.delivered` events of `projectId` without deliveries (nothing waits to send them), as the
 * retention finds old events once their webhooks have been served.
 */
export async function seedEvents(target: SeedTarget, events: Spread & { projectId: string }): Promise<void> {
  const once = {
    event_id: idAt(target, 'evt', msOf(events), serialOf(events)),
    created: isoAt(target, msOf(events)),
  };
  await insertSeries(target, 'events', events.count, once, {
    id: computed('event_id'),
    project_id: events.projectId,
    type: 'email.delivered',
    data: '{"email_id":"msg_old","recipient":"old@example.org"}',
    created_at: computed('created'),
    email_id: null,
  });
}

/** SQLite's page cache while seeding (KiB): the default 2 MB made every index insert a read from the OS. */
const SEEDING_CACHE_KIB = 256 * 1024;

/** The tables the seeders write. */
const SEEDED_TABLES = ['emails', 'email_recipients', 'events', 'deliveries', 'delivery_attempts'] as const;

/**
 * The secondary indexes of the seeded tables (not those behind a primary key or a unique constraint), each
 * with the statement that makes it again.
 */
async function secondaryIndexes(trx: SeedTarget): Promise<Array<{ name: string; definition: string }>> {
  const tables = sql.join(SEEDED_TABLES.map((table) => sql.lit(table)));
  const result =
    trx.engine === 'postgres'
      ? await sql<{
          name: string;
          definition: string;
        }>`SELECT c.relname AS name, pg_get_indexdef(c.oid) AS definition
          FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
          JOIN pg_namespace n ON n.oid = t.relnamespace
          WHERE n.nspname = current_schema() AND t.relname IN (${tables}) AND NOT x.indisprimary
            AND NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conindid = c.oid)`.execute(trx.db)
      : await sql<{ name: string; definition: string }>`SELECT name, sql AS definition FROM sqlite_master
          WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN (${tables})`.execute(trx.db);
  return result.rows;
}

/**
 * Runs `seed` in one transaction as a restore would: the secondary indexes dropped first and built again
 * after (one sort each instead of a B-tree descent per row and index, which on PostgreSQL read pages from
 * outside its buffers for every row), foreign keys not checked (the rows are consistent by construction).
 * The server is idle meanwhile. Then PostgreSQL's tables are vacuumed and analyzed, as autovacuum would soon
 * do after a bulk load (so it does not do it while latency is measured, and the planner has statistics);
 * SQLite is left as Postwire leaves it (it never runs ANALYZE there), so its plans are the ones users get.
 */
export async function seedInOneTransaction(
  target: SeedTarget,
  seed: (trx: SeedTarget) => Promise<void>,
): Promise<void> {
  const postgres = target.engine === 'postgres';
  const load = async (trx: SeedTarget) => {
    const indexes = await secondaryIndexes(trx);
    for (const index of indexes) await sql`DROP INDEX ${sql.id(index.name)}`.execute(trx.db);
    await seed(trx);
    for (const index of indexes) await sql.raw(index.definition).execute(trx.db);
  };
  if (postgres) {
    await target.db.transaction().execute(async (trx) => {
      // Foreign keys are triggers; `replica` skips them for this transaction only.
      await sql`SET LOCAL session_replication_role = replica`.execute(trx);
      await sql`SET LOCAL maintenance_work_mem = '256MB'`.execute(trx);
      await load({ db: trx, engine: target.engine });
    });
    for (const table of SEEDED_TABLES) await sql`VACUUM (ANALYZE) ${sql.table(table)}`.execute(target.db);
    return;
  }
  // Both pragmas apply to the connection, outside a transaction (foreign_keys is ignored inside one).
  const { cache_size: cacheSize } = (await sql<{ cache_size: number }>`PRAGMA cache_size`.execute(target.db))
    .rows[0]!;
  await sql`PRAGMA cache_size = ${sql.raw(String(-SEEDING_CACHE_KIB))}`.execute(target.db);
  await sql`PRAGMA foreign_keys = OFF`.execute(target.db);
  try {
    await target.db.transaction().execute((trx) => load({ db: trx, engine: target.engine }));
  } finally {
    await sql`PRAGMA foreign_keys = ON`.execute(target.db);
    await sql`PRAGMA cache_size = ${sql.raw(String(cacheSize))}`.execute(target.db);
  }
}

/**
 * Bytes the database takes on disk: on SQLite the file and its WAL once checkpointed; on PostgreSQL every
 * table of the schema with its indexes and TOAST.
 */
export async function databaseBytes(target: SeedTarget, sqliteFile: string | undefined): Promise<number> {
  if (target.engine === 'postgres') {
    const result = await sql<{
      bytes: string;
    }>`SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) AS bytes
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = current_schema() AND c.relkind = 'r'`.execute(target.db);
    return Number(result.rows[0]!.bytes);
  }
  await sql`PRAGMA wal_checkpoint(TRUNCATE)`.execute(target.db);
  const wal = `${sqliteFile!}-wal`;
  return statSync(sqliteFile!).size + (existsSync(wal) ? statSync(wal).size : 0);
}
