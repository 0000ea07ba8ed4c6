import { type Insertable, type Kysely, sql } from 'kysely';
import { createMessagePieces } from '../../db/message-pieces.ts';
import { type PruneTarget, pruneTarget } from '../../db/prune.ts';
import { idAt } from '../../lib/ids.ts';
import { type Page, type PageRequest, pageByIdDesc } from '../../db/pagination.ts';
import type { Database, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { ResolvedColumns } from './contact-imports.csv.ts';

export type ImportStatus = 'queued' | 'in_progress' | 'completed' | 'failed';

/** What the job does with each row: stored with it (as JSON), fixed when the upload is accepted. */
export interface ImportPlan {
  columns: ResolvedColumns;
  /** Columns in the header: a row with another number fails. */
  width: number;
  onConflict: 'update' | 'skip';
  segmentIds: string[];
  topics: Array<{ topicId: string; subscription: 'opt_in' | 'opt_out' }>;
}

export interface ImportCounts {
  read: number;
  created: number;
  updated: number;
  skipped: number;
  failed: number;
}

export interface ImportError {
  row: number;
  reason: string;
}

export interface ContactImportRecord {
  id: string;
  projectId: string;
  status: ImportStatus;
  plan: ImportPlan;
  bytes: number;
  total: number;
  counts: ImportCounts;
  errors: ImportError[];
  failure: string | null;
  createdAt: string;
  startedAt: string | null;
  completedAt: string | null;
}

/** Where an import's CSV is kept until its job has read it (message_pieces). */
export const piecesOwner = (id: string) => `contact_import:${id}`;

export const toImportRecord = (row: Row<'contact_imports'>): ContactImportRecord => ({
  id: row.id,
  projectId: row.project_id,
  status: row.status,
  plan: JSON.parse(row.plan) as ImportPlan,
  bytes: Number(row.bytes),
  total: Number(row.rows_total),
  counts: {
    read: Number(row.rows_read),
    created: Number(row.created_count),
    updated: Number(row.updated_count),
    skipped: Number(row.skipped_count),
    failed: Number(row.failed_count),
  },
  errors: JSON.parse(row.errors) as ImportError[],
  failure: row.failure,
  createdAt: row.created_at,
  startedAt: row.started_at,
  completedAt: row.completed_at,
});

/** A new import's row: its counts, errors and times are the table's defaults until its job writes them. */
const newRow = (record: ContactImportRecord): Insertable<Database['contact_imports']> => ({
  id: record.id,
  project_id: record.projectId,
  status: record.status,
  plan: JSON.stringify(record.plan),
  bytes: record.bytes,
  rows_total: record.total,
  created_at: record.createdAt,
});

/** The contact_imports table (the API's side: the job's insert, reads, and the progress the job writes) and its CSV. */
export function createContactImportRepo(db: Kysely<Database>) {
  const pieces = createMessagePieces(db);
  const select = (projectId: string) =>
    db.selectFrom('contact_imports').selectAll().where('project_id', '=', projectId);

  return {
    /** Stores one piece of an upload's CSV, before the job's row exists (never in a transaction). */
    storePiece: (id: string, seq: number, bytes: Buffer) => pieces.writePiece(piecesOwner(id), seq, bytes),
    /** A piece of the CSV, or undefined past the last. */
    readPiece: (id: string, seq: number) => pieces.readPiece(piecesOwner(id), seq),
    /** The CSV's pieces, once read (or an upload that was refused). */
    removePieces: (id: string) => pieces.remove(piecesOwner(id)),

    /**
     * Retention: finished imports (completed or failed) from before `cutoff`, with any pieces left of their
     * CSV (an upload whose row was never stored leaves pieces no row names: they go too). One queued or under
     * way stays, however old.
     */
    pruneTargets: (cutoff: Date): PruneTarget[] => {
      const before = idAt('cimp', cutoff);
      const finished = sql<boolean>`id < ${before} AND status IN ('completed', 'failed')`;
      return [
        pieces.pruneTarget(
          'contact_import',
          before,
          sql<boolean>`substr(owner, 16) NOT IN (SELECT id FROM contact_imports
            WHERE id < ${before} AND status IN ('queued', 'in_progress'))`,
        ),
        pruneTarget(db, 'contact_imports', 'id', finished),
      ];
    },

    async insert(record: ContactImportRecord, transaction: Transaction): Promise<void> {
      await transaction.db.insertInto('contact_imports').values(newRow(record)).execute();
    },

    async find(projectId: string, id: string): Promise<ContactImportRecord | undefined> {
      const row = await select(projectId).where('id', '=', id).executeTakeFirst();
      return row && toImportRecord(row);
    },

    async list(
      projectId: string,
      page: PageRequest,
      status: ImportStatus | undefined,
    ): Promise<Page<ContactImportRecord>> {
      const result = await pageByIdDesc(page, (cursor, order, limit) => {
        let query = select(projectId);
        if (status !== undefined) query = query.where('status', '=', status);
        if (cursor) query = query.where('id', cursor.op, cursor.id);
        return query.orderBy('id', order).limit(limit).execute();
      });
      return { items: result.items.map(toImportRecord), hasMore: result.hasMore };
    },

    /**
     * A batch's progress, in the batch's transaction, while `workerId` holds the job: the counts so far, the
     * errors kept, and the lease carried to `until`. False when the job is no longer this worker's (its lease
     * ran out and another took it, or the project is gone): the batch must not commit.
     */
    async progress(
      id: string,
      workerId: string,
      counts: ImportCounts,
      errors: readonly ImportError[],
      until: string,
      transaction: Transaction,
    ): Promise<boolean> {
      const result = await transaction.db
        .updateTable('contact_imports')
        .set({
          rows_read: counts.read,
          created_count: counts.created,
          updated_count: counts.updated,
          skipped_count: counts.skipped,
          failed_count: counts.failed,
          errors: JSON.stringify(errors),
          locked_until: until,
        })
        .where('id', '=', id)
        .where('locked_by', '=', workerId)
        .executeTakeFirst();
      return Number(result.numUpdatedRows) > 0;
    },

    /** The job's end: completed, or failed with why; the lease given back. */
    async finish(
      id: string,
      workerId: string,
      end: { status: 'completed' | 'failed'; failure: string | null; at: string },
    ): Promise<boolean> {
      const result = await db
        .updateTable('contact_imports')
        .set({
          status: end.status,
          failure: end.failure,
          completed_at: end.at,
          locked_by: null,
          locked_until: null,
        })
        .where('id', '=', id)
        .where('locked_by', '=', workerId)
        .executeTakeFirst();
      return Number(result.numUpdatedRows) > 0;
    },
  };
}

export type ContactImportRepo = ReturnType<typeof createContactImportRepo>;
