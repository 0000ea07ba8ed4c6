import { CompiledQuery } from 'kysely';
import { columnArrays, unnestedRows } from '../../db/sql-text.ts';
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
export type OutcomeValues = Record<(typeof OUTCOME_COLUMNS)[number], unknown>;
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

/** A row the outcome `v` moves on: still this worker's, and pending. */
const HELD = `deliveries.locked_by = v.worker AND deliveries.status = 'pending'`;
const ifAttempted = (column: string, value: string) =>
  `${column} = CASE WHEN v.attempted = 1 THEN ${value} ELSE deliveries.${column} END`;

/** Moves the deliveries `v` names, that this worker holds, to their outcome's state; returns their ids. */
export const UPDATE_OUTCOMES = `UPDATE deliveries SET status = v.status, attempts = deliveries.attempts + v.attempted,
    ${ifAttempted('last_attempt_at', 'v.attempted_at')}, ${ifAttempted('last_status_code', 'v.status_code')},
    ${ifAttempted('last_attempt_id', 'v.attempt_id')}, ${ifAttempted('last_duration_ms', 'v.duration_ms')},
    ${ifAttempted('last_attempt_error', 'v.attempt_error')}, ${ifAttempted('last_response_excerpt', 'v.excerpt')},
    last_error = v.last_error, next_attempt_at = COALESCE(v.next_attempt_at, deliveries.next_attempt_at),
    locked_until = NULL, locked_by = NULL, updated_at = v.now, completed_at = v.completed_at
  FROM v WHERE deliveries.id = v.id AND ${HELD}
  RETURNING deliveries.id`;

/**
 * The attempt a held row keeps goes to the log before a new one takes its place. Should the lease have been
 * lost meanwhile (PostgreSQL reads the rows as they were), the holder moves the same attempt itself later,
 * and the id keeps the log from having it twice.
 */
export const MOVE_ATTEMPTS = `INSERT INTO delivery_attempts (${ATTEMPT_COLUMNS.join(', ')})
  SELECT deliveries.last_attempt_id, deliveries.id, deliveries.project_id, deliveries.webhook_id,
    deliveries.event_id, deliveries.last_attempt_at, deliveries.last_status_code, deliveries.last_duration_ms,
    deliveries.last_attempt_error, deliveries.last_response_excerpt
  FROM deliveries JOIN v ON deliveries.id = v.id
  WHERE v.attempted = 1 AND deliveries.last_attempt_id IS NOT NULL AND ${HELD}
  ON CONFLICT (id) DO NOTHING`;

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
const OUTCOMES_WITH = `WITH v AS (SELECT ${OUTCOME_COLUMNS.join(', ')} FROM ${unnestedRows(OUTCOME_COLUMNS, OUTCOME_CASTS)}),
  moved AS (${MOVE_ATTEMPTS}), updated AS (${UPDATE_OUTCOMES})`;
/**
 * The outcomes whose rows the write did not move (the lease was lost): almost always none, so the answer is
 * empty where the ids of the rows it moved were a row (or an array element) per outcome for the driver to parse.
 */
const NOT_HELD = 'SELECT v.id FROM v WHERE v.id NOT IN (SELECT id FROM updated)';
const OUTCOMES_TEXT = `${OUTCOMES_WITH} ${NOT_HELD}`;
const FIRST_AFTER_OUTCOMES = OUTCOME_COLUMNS.length + 1;
/**
 * The outcomes' write with the lanes' top-ups: they never take a row being recorded (one statement updates a
 * row once; a retry is recorded, and due later, before any claim can see it). One row per claimed delivery,
 * or one of nulls when none was; each carries the ids of the outcomes the write did not hold (NOT_HELD).
 */
const OUTCOMES_AND_TOP_UPS_TEXT = (() => {
  const at = (offset: number) => `$${FIRST_AFTER_OUTCOMES + offset}`;
  const due = webhooksDueText(at(2), at(3), at(4), ' AND id NOT IN (SELECT id FROM v)');
  return `${OUTCOMES_WITH},
    claimed AS (UPDATE deliveries SET locked_until = ${at(0)}, locked_by = ${at(1)} WHERE ${dueRows(due)}
      RETURNING ${LEASED_COLUMNS})
    SELECT h.not_held, c.claimed_id, ${CLAIMED_NAMES} FROM (SELECT array_agg(id) AS not_held FROM (${NOT_HELD}) AS n) AS h
    LEFT JOIN (SELECT d.id AS claimed_id, d.next_attempt_at AS claimed_due, ${CLAIMED_COLUMNS}
      FROM claimed d ${WITH_EVENT_AND_WEBHOOK}) AS c ON true
    ORDER BY c.claimed_due, c.claimed_id`;
})();

/**
 * PostgreSQL: the outcomes' write (UPDATE_OUTCOMES and MOVE_ATTEMPTS in one statement, which read the rows
 * as they were before it), with `topUp`'s claims when given.
 */
export function postgresOutcomes(
  values: readonly OutcomeValues[],
  topUp?: { lease: StoredLease; webhooks: WebhookTopUps },
): CompiledQuery {
  const arrays = columnArrays(OUTCOME_COLUMNS, values);
  if (!topUp) return CompiledQuery.raw(OUTCOMES_TEXT, arrays);
  return CompiledQuery.raw(OUTCOMES_AND_TOP_UPS_TEXT, [
    ...arrays,
    ...leaseParameters(topUp.lease),
    topUp.webhooks.map((webhook) => webhook.webhookId),
    topUp.webhooks.map((webhook) => webhook.limit),
  ]);
}
