import { CompiledQuery } from 'kysely';
import { columnArrays, textsByShape, unnestedRows } from '../../db/sql-text.ts';
import type { StoredLease } from '../../queue/lease.ts';

// The webhook deliveries queue's SQL texts (deliveries.queue.ts runs them): the parts both engines share, and
// PostgreSQL's claims and outcomes' writes. Those take their rows and webhooks as array parameters, so each
// is one text whatever the number of outcomes or webhooks: parsed and planned once per connection and kept
// as a prepared statement. As VALUES lists and UNION ALLs they were a new text for every batch size and
// every number of webhooks topped up (hundreds of them, past the engine's 200 named statements, so most
// were parsed and planned by PostgreSQL on every run).

/** A claimed delivery `d` with its event and webhook. */
export const WITH_EVENT_AND_WEBHOOK =
  'JOIN events e ON e.id = d.event_id JOIN webhooks w ON w.id = d.webhook_id';
/** The columns a claim returns, read with the claim (PostgreSQL: in the same statement). */
export const CLAIMED_COLUMNS = `d.id, d.project_id, d.event_id, d.webhook_id, d.attempts, d.last_attempt_id, e.type, e.data,
  e.created_at AS event_created_at, w.url, w.format, w.enabled, w.disabled_reason, w.secret_sealed,
  w.previous_secret_sealed, w.previous_secret_expires_at`;

/**
 * Claimed deliveries come back in the queue's order (QueueSource.claim): the worker starts them in it. Neither
 * an UPDATE's RETURNING nor a read by id promises any order (PostgreSQL returned a claim's rows backwards).
 */
export const IN_QUEUE_ORDER = 'ORDER BY d.next_attempt_at, d.id';

/** The columns a claim's UPDATE returns, for CLAIMED_COLUMNS to read beside its event and webhook. */
export const LEASED_COLUMNS =
  'id, project_id, event_id, webhook_id, attempts, last_attempt_id, next_attempt_at';

/** An outcome as the row of values its statement reads (`v`), by column. */
export const OUTCOME_COLUMNS = [
  'id',
  'worker',
  'status',
  'attempted',
  'attempted_at',
  'status_code',
  'last_error',
  'next_attempt_at',
  'now',
  'completed_at',
  'attempt_id',
  'duration_ms',
  'attempt_error',
  'excerpt',
] as const;
type OutcomeColumn = (typeof OUTCOME_COLUMNS)[number];
export type OutcomeValues = Record<OutcomeColumn, unknown>;
/** The outcome columns that are not text (a VALUES list or an array parameter is typed by these). */
export const OUTCOME_CASTS = {
  attempted: 'integer',
  status_code: 'integer',
  duration_ms: 'integer',
} as const;

export const ATTEMPT_COLUMNS = [
  'id',
  'delivery_id',
  'project_id',
  'webhook_id',
  'event_id',
  'attempted_at',
  'status_code',
  'duration_ms',
  'error',
  'response_excerpt',
] as const;

/**
 * Outcome columns whose values a batch's outcomes all share, written into its text as constants rather than
 * bound per row (`null` is SQL's NULL). See SUCCEEDED.
 */
type KnownOutcome = Partial<Record<OutcomeColumn, string | number | null>>;

/** An outcome's value of `column` in the statements below: `v`'s column, or the constant `known` gives. */
const outcomeValue = (known: KnownOutcome) => (column: OutcomeColumn) => {
  if (!(column in known)) return `v.${column}`;
  const value = known[column];
  return value === null ? 'NULL' : typeof value === 'number' ? String(value) : `'${value}'`;
};

/**
 * What a successful attempt's outcome says besides its own values (an attempt made, no error, nothing due
 * again): a batch of only these (the common one) binds the other 9 values of each outcome, not 14: on SQLite as
 * many `?`s, on PostgreSQL as many arrays to serialise.
 */
const SUCCEEDED = {
  status: 'succeeded',
  attempted: 1,
  last_error: null,
  next_attempt_at: null,
  attempt_error: null,
} as const satisfies KnownOutcome;
/** The columns of an outcome its statement binds: all, or those SUCCEEDED leaves. */
const boundColumns = (known: KnownOutcome) => OUTCOME_COLUMNS.filter((column) => !(column in known));
const SUCCEEDED_COLUMNS = boundColumns(SUCCEEDED);

/** Whether every outcome in `values` is a success as SUCCEEDED says it. */
const allSucceeded = (values: readonly OutcomeValues[]) =>
  values.every((row) =>
    Object.entries(SUCCEEDED).every(([column, value]) => row[column as OutcomeColumn] === value),
  );

/** A row the outcome `v` moves on: still this worker's, and pending. */
const HELD = `deliveries.locked_by = v.worker AND deliveries.status = 'pending'`;

/** Moves the deliveries `v` names, that this worker holds, to their outcome's state; returns their ids. */
function updateOutcomes(known: KnownOutcome = {}): string {
  const v = outcomeValue(known);
  // The attempt's columns change only when an attempt was made.
  const ifAttempted = (column: string, value: OutcomeColumn) =>
    known.attempted === 1
      ? `${column} = ${v(value)}`
      : `${column} = CASE WHEN ${v('attempted')} = 1 THEN ${v(value)} ELSE deliveries.${column} END`;
  // A retry's due time; none (NULL) leaves it as it is.
  const nextAttempt =
    known.next_attempt_at === null
      ? ''
      : `next_attempt_at = COALESCE(${v('next_attempt_at')}, deliveries.next_attempt_at), `;
  return `UPDATE deliveries SET status = ${v('status')}, attempts = deliveries.attempts + ${v('attempted')},
    ${ifAttempted('last_attempt_at', 'attempted_at')}, ${ifAttempted('last_status_code', 'status_code')},
    ${ifAttempted('last_attempt_id', 'attempt_id')}, ${ifAttempted('last_duration_ms', 'duration_ms')},
    ${ifAttempted('last_attempt_error', 'attempt_error')}, ${ifAttempted('last_response_excerpt', 'excerpt')},
    last_error = ${v('last_error')}, ${nextAttempt}locked_until = NULL, locked_by = NULL, updated_at = v.now,
    completed_at = ${v('completed_at')}
  FROM v WHERE deliveries.id = v.id AND ${HELD}
  RETURNING deliveries.id`;
}
export const UPDATE_OUTCOMES = updateOutcomes();

/**
 * The attempt a held row keeps goes to the log before a new one takes its place. Should the lease have been
 * lost meanwhile (PostgreSQL reads the rows as they were), the holder moves the same attempt itself later,
 * and the id keeps the log from having it twice.
 */
const moveAttempts = (
  known: KnownOutcome = {},
) => `INSERT INTO delivery_attempts (${ATTEMPT_COLUMNS.join(', ')})
  SELECT deliveries.last_attempt_id, deliveries.id, deliveries.project_id, deliveries.webhook_id,
    deliveries.event_id, deliveries.last_attempt_at, deliveries.last_status_code, deliveries.last_duration_ms,
    deliveries.last_attempt_error, deliveries.last_response_excerpt
  FROM deliveries JOIN v ON deliveries.id = v.id
  WHERE ${outcomeValue(known)('attempted')} = 1 AND deliveries.last_attempt_id IS NOT NULL AND ${HELD}
  ON CONFLICT (id) DO NOTHING`;
export const MOVE_ATTEMPTS = moveAttempts();

/** Webhooks' lanes to top up: up to `limit` of each one's due deliveries (claimForWebhooks). */
export type WebhookTopUps = ReadonlyArray<{ webhookId: string; limit: number }>;

// PostgreSQL.

/** Due, pending and not leased (or the lease ran out) at `$now`, as conditions on `deliveries`. */
const claimableAt = (now: string) =>
  `status = 'pending' AND next_attempt_at <= ${now} AND (locked_until IS NULL OR locked_until < ${now})`;

/**
 * The ids of up to each webhook's limit of its due deliveries at `$now`, oldest due first, the webhooks and
 * limits two arrays (`$ids`, `$limits`): an index probe per webhook on the pending rows' (webhook_id,
 * next_attempt_at) index, however long other webhooks' backlogs are. `also`: a further condition.
 */
const webhooksDueText = (now: string, ids: string, limits: string, also = '') =>
  `SELECT due.id FROM unnest((SELECT ${ids}::text[]), (SELECT ${limits}::integer[])) AS t (webhook_id, lim)
    CROSS JOIN LATERAL (SELECT id FROM deliveries WHERE ${claimableAt(now)}${also} AND webhook_id = t.webhook_id
      ORDER BY next_attempt_at LIMIT t.lim FOR UPDATE SKIP LOCKED) AS due`;

/**
 * The rows `due` selects, as a condition on `deliveries`. As an array, not `id IN (…)`: the planner cannot
 * know a limit read from an array (`LIMIT t.lim`) and took a tenth of the table as what `due` returns, then
 * read the whole of deliveries and of events to join them by hash (5.8 ms for 16 rows of 3,000); an array
 * it estimates at a few rows, found by primary key.
 */
const dueRows = (due: string) => `id = ANY (ARRAY(${due}))`;

/** Leases the rows `due` selects (`$1` until, `$2` worker) and reads them with their event and webhook. */
const claimText = (due: string) => `WITH d AS (UPDATE deliveries SET locked_until = $1, locked_by = $2
    WHERE ${dueRows(due)} RETURNING ${LEASED_COLUMNS})
  SELECT ${CLAIMED_COLUMNS} FROM d ${WITH_EVENT_AND_WEBHOOK} ${IN_QUEUE_ORDER}`;

/** Up to `$5` due deliveries of any webhook but `$4`'s, oldest due first. */
const CLAIM_TEXT = claimText(
  `SELECT id FROM deliveries WHERE ${claimableAt('$3')} AND webhook_id <> ALL ($4::text[])
    ORDER BY next_attempt_at LIMIT $5 FOR UPDATE SKIP LOCKED`,
);
const CLAIM_FOR_WEBHOOKS_TEXT = claimText(webhooksDueText('$3', '$4', '$5'));

const leaseParameters = (lease: StoredLease) => [lease.lockedUntil, lease.workerId, lease.now];

/** PostgreSQL: leases up to `limit` due deliveries of webhooks other than `excluded`. */
export const postgresClaim = (lease: StoredLease, limit: number, excluded: readonly string[]) =>
  CompiledQuery.raw(CLAIM_TEXT, [...leaseParameters(lease), excluded, limit]);

/** PostgreSQL: leases up to each webhook's limit of its due deliveries. */
export const postgresClaimForWebhooks = (lease: StoredLease, webhooks: WebhookTopUps) =>
  CompiledQuery.raw(CLAIM_FOR_WEBHOOKS_TEXT, [
    ...leaseParameters(lease),
    webhooks.map((webhook) => webhook.webhookId),
    webhooks.map((webhook) => webhook.limit),
  ]);

/** CLAIMED_COLUMNS as a subquery `c` answers them (by its alias, or the column's own name). */
const CLAIMED_NAMES = CLAIMED_COLUMNS.split(',')
  .map(
    (column) =>
      `c.${column
        .trim()
        .split(/\s+AS\s+|\./)
        .pop()!}`,
  )
  .join(', ');

// No `*` column lists: the engine leaves a text with one unprepared (src/db/engine/postgres.ts).
const outcomesWith = (known: KnownOutcome) => {
  const columns = boundColumns(known);
  return `WITH v AS (SELECT ${columns.join(', ')} FROM ${unnestedRows(columns, OUTCOME_CASTS)}),
  moved AS (${moveAttempts(known)}), updated AS (${updateOutcomes(known)})`;
};
/**
 * The outcomes whose rows the write did not move (the lease was lost): almost always none, so the answer is
 * empty where the ids of the rows it moved were a row (or an array element) per outcome for the driver to parse.
 */
const NOT_HELD = 'SELECT v.id FROM v WHERE v.id NOT IN (SELECT id FROM updated)';
/**
 * The outcomes' write with the lanes' top-ups: they never take a row being recorded (one statement updates a
 * row once; a retry is recorded, and due later, before any claim can see it). One row per claimed delivery,
 * or one of nulls when none was; each carries the ids of the outcomes the write did not hold (NOT_HELD).
 */
const outcomesAndTopUpsText = (known: KnownOutcome) => {
  const at = (offset: number) => `$${boundColumns(known).length + 1 + offset}`;
  const due = webhooksDueText(at(2), at(3), at(4), ' AND id NOT IN (SELECT id FROM v)');
  return `${outcomesWith(known)},
    claimed AS (UPDATE deliveries SET locked_until = ${at(0)}, locked_by = ${at(1)} WHERE ${dueRows(due)}
      RETURNING ${LEASED_COLUMNS})
    SELECT h.not_held, c.claimed_id, ${CLAIMED_NAMES} FROM (SELECT array_agg(id) AS not_held FROM (${NOT_HELD}) AS n) AS h
    LEFT JOIN (SELECT d.id AS claimed_id, d.next_attempt_at AS claimed_due, ${CLAIMED_COLUMNS}
      FROM claimed d ${WITH_EVENT_AND_WEBHOOK}) AS c ON true
    ORDER BY c.claimed_due, c.claimed_id`;
};
/** Each text in both forms: every outcome's values bound, or a batch of successes' (SUCCEEDED). */
const OUTCOMES_TEXTS = {
  all: `${outcomesWith({})} ${NOT_HELD}`,
  succeeded: `${outcomesWith(SUCCEEDED)} ${NOT_HELD}`,
};
const OUTCOMES_AND_TOP_UPS_TEXTS = {
  all: outcomesAndTopUpsText({}),
  succeeded: outcomesAndTopUpsText(SUCCEEDED),
};

/**
 * PostgreSQL: the outcomes' write (UPDATE_OUTCOMES and MOVE_ATTEMPTS in one statement, which read the rows
 * as they were before it), with `topUp`'s claims when given.
 */
export function postgresOutcomes(
  values: readonly OutcomeValues[],
  topUp?: { lease: StoredLease; webhooks: WebhookTopUps },
): CompiledQuery {
  const kind = allSucceeded(values) ? 'succeeded' : 'all';
  const arrays = columnArrays(kind === 'succeeded' ? SUCCEEDED_COLUMNS : OUTCOME_COLUMNS, values);
  if (!topUp) return CompiledQuery.raw(OUTCOMES_TEXTS[kind], arrays);
  return CompiledQuery.raw(OUTCOMES_AND_TOP_UPS_TEXTS[kind], [
    ...arrays,
    ...leaseParameters(topUp.lease),
    topUp.webhooks.map((webhook) => webhook.webhookId),
    topUp.webhooks.map((webhook) => webhook.limit),
  ]);
}

// SQLite. Its statements take a `?` per value, so a text depends on how many webhooks, ids or outcomes it
// holds: each is written once per such shape and kept, with its values bound in the order of its `?`s. Written
// per call, the outcomes' VALUES list alone cost about 4.5 µs a delivery of the worker's CPU (issue 43, sixth
// session), and every new text was hashed again to find its prepared statement.

/** `count` placeholders, comma-separated. */
const marks = (count: number) => Array.from({ length: count }, () => '?').join(', ');
/** A text per shape (a count, or a count and a kind), written on first use. */
const byShape = (write: (count: number, kind: string) => string) => {
  const texts = textsByShape((shape) => {
    const [count, kind] = shape.split(' ');
    return write(Number(count), kind ?? '');
  });
  return (count: number, kind = '') => texts(kind ? `${count} ${kind}` : String(count));
};

/** Leases the rows `due` selects (`?` until, `?` worker, then `due`'s values) and returns their ids. */
const sqliteLease = (due: string) =>
  `UPDATE deliveries SET locked_until = ?, locked_by = ? WHERE id IN (${due}) RETURNING id`;

/**
 * SQLite: leases up to `limit` due deliveries of any webhook but `excluded`, oldest due first; its values:
 * until, worker, now, now, the excluded ids, limit (sqliteClaimValues).
 */
export const sqliteClaimText = byShape((excluded) =>
  sqliteLease(
    `SELECT id FROM deliveries WHERE ${claimableAt('?')}${
      excluded > 0 ? ` AND webhook_id NOT IN (${marks(excluded)})` : ''
    } ORDER BY next_attempt_at LIMIT ?`,
  ),
);
export const sqliteClaimValues = (lease: StoredLease, limit: number, excluded: readonly string[]) => [
  lease.lockedUntil,
  lease.workerId,
  lease.now,
  lease.now,
  ...excluded,
  limit,
];

/**
 * SQLite: leases up to each of `webhooks`' limit of its due deliveries, oldest due first: one index scan per
 * webhook on the pending rows' (webhook_id, next_attempt_at) index, however long other webhooks' backlogs are.
 */
export const sqliteClaimForWebhooksText = byShape((webhooks) =>
  sqliteLease(
    Array.from(
      { length: webhooks },
      (_, index) =>
        `SELECT id FROM (SELECT id FROM deliveries WHERE ${claimableAt('?')}
          AND webhook_id = ? ORDER BY next_attempt_at LIMIT ?) AS w${index}`,
    ).join(' UNION ALL '),
  ),
);
export const sqliteClaimForWebhooksValues = (lease: StoredLease, webhooks: WebhookTopUps) => {
  const values: unknown[] = [lease.lockedUntil, lease.workerId];
  for (const { webhookId, limit } of webhooks) values.push(lease.now, lease.now, webhookId, limit);
  return values;
};

/** SQLite: the claimed rows `?…` (then `?` worker) with their event and webhook, in the queue's order. */
export const sqliteClaimedText = byShape(
  (ids) => `SELECT ${CLAIMED_COLUMNS} FROM deliveries d ${WITH_EVENT_AND_WEBHOOK}
    WHERE d.id IN (${marks(ids)}) AND d.locked_by = ? ${IN_QUEUE_ORDER}`,
);

/** SQLite: `v`, the outcomes as a VALUES list of `count` rows of `known`'s bound columns. */
const sqliteOutcomesTable = (count: number, known: KnownOutcome) => {
  const columns = boundColumns(known);
  const row = `(${columns
    .map((column) =>
      column in OUTCOME_CASTS ? `CAST(? AS ${OUTCOME_CASTS[column as keyof typeof OUTCOME_CASTS]})` : '?',
    )
    .join(', ')})`;
  return `WITH v (${columns.join(', ')}) AS (VALUES ${Array.from({ length: count }, () => row).join(', ')})`;
};
const knownBy = (kind: string): KnownOutcome => (kind === 'succeeded' ? SUCCEEDED : {});
const sqliteUpdateOutcomesText = byShape(
  (count, kind) => `${sqliteOutcomesTable(count, knownBy(kind))} ${updateOutcomes(knownBy(kind))}`,
);
const sqliteMoveAttemptsText = byShape(
  (count, kind) => `${sqliteOutcomesTable(count, knownBy(kind))} ${moveAttempts(knownBy(kind))}`,
);

/**
 * SQLite: the outcomes' statements (UPDATE_OUTCOMES, and MOVE_ATTEMPTS to run first when a row holds an
 * earlier attempt) over the same values.
 */
export function sqliteOutcomes(values: readonly OutcomeValues[]): {
  update: CompiledQuery;
  moveAttempts: CompiledQuery;
} {
  const kind = allSucceeded(values) ? 'succeeded' : '';
  const columns = kind ? SUCCEEDED_COLUMNS : OUTCOME_COLUMNS;
  const bound: unknown[] = [];
  for (const row of values) for (const column of columns) bound.push(row[column]);
  return {
    update: CompiledQuery.raw(sqliteUpdateOutcomesText(values.length, kind), bound),
    moveAttempts: CompiledQuery.raw(sqliteMoveAttemptsText(values.length, kind), bound),
  };
}
