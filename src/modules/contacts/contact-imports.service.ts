import type { IncomingHttpHeaders } from 'node:http';
import type { PageRequest } from '../../db/pagination.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { Clock } from '../../lib/clock.ts';
import { invalidParam, notFound } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import type { ContactPropertyRepo } from './contact-properties.repo.ts';
import { type ColumnMapInput, parseJsonField, resolveColumns } from './contact-imports.csv.ts';
import type {
  ContactImportRecord,
  ContactImportRepo,
  ImportPlan,
  ImportStatus,
} from './contact-imports.repo.ts';
import { readUpload } from './contact-imports.upload.ts';

/** The most segments and topics one import adds its contacts to. */
export const MAX_IMPORT_TARGETS = 10;

export interface ContactImportView {
  object: 'contact_import';
  id: string;
  status: ImportStatus;
  created_at: string;
  started_at: string | null;
  completed_at: string | null;
  counts: { total: number; read: number; created: number; updated: number; skipped: number; failed: number };
  errors: Array<{ row: number; reason: string }>;
  failure: string | null;
}

export const toImportView = (record: ContactImportRecord): ContactImportView => ({
  object: 'contact_import',
  id: record.id,
  status: record.status,
  created_at: record.createdAt,
  started_at: record.startedAt,
  completed_at: record.completedAt,
  counts: { total: record.total, ...record.counts },
  errors: record.errors,
  failure: record.failure,
});

export interface ContactImportServiceDeps {
  repo: ContactImportRepo;
  properties: Pick<ContactPropertyRepo, 'all'>;
  clock: Clock;
  /** The segments and topics an import names, looked up in the project (another project's is a 404). */
  segments: { find(projectId: string, id: string): Promise<{ id: string; filter: unknown } | undefined> };
  topics: { find(projectId: string, id: string): Promise<{ id: string } | undefined> };
  /** Wakes this process's import worker once a job is stored. */
  wake: () => void;
}

const CONFLICTS: Record<string, 'update' | 'skip'> = { update: 'update', upsert: 'update', skip: 'skip' };

/** `segments` as sent: ids, or Resend's `[{ id }]`. */
function segmentIdsOf(given: unknown): string[] {
  if (given === undefined) return [];
  if (!Array.isArray(given) || given.length > MAX_IMPORT_TARGETS) {
    throw invalidParam('segments', `segments must be a list of at most ${MAX_IMPORT_TARGETS} segment ids.`);
  }
  return given.map((each, index) => {
    const id = typeof each === 'string' ? each : (each as { id?: unknown } | null)?.id;
    if (typeof id !== 'string') throw invalidParam(`segments[${index}]`, 'A segment is its id (`seg_…`).');
    return id;
  });
}

/** `topics` as sent: `[{ id, subscription }]`. */
function topicsOf(given: unknown): ImportPlan['topics'] {
  if (given === undefined) return [];
  if (!Array.isArray(given) || given.length > MAX_IMPORT_TARGETS) {
    throw invalidParam(
      'topics',
      `topics must be a list of at most ${MAX_IMPORT_TARGETS} { id, subscription }.`,
    );
  }
  return given.map((each: unknown, index) => {
    const { id, subscription } = (each ?? {}) as { id?: unknown; subscription?: unknown };
    if (typeof id !== 'string' || (subscription !== 'opt_in' && subscription !== 'opt_out')) {
      throw invalidParam(
        `topics[${index}]`,
        'A topic is { "id": "top_…", "subscription": "opt_in" | "opt_out" }.',
      );
    }
    return { topicId: id, subscription };
  });
}

/**
 * Contact imports: a CSV uploaded, checked and kept (the upload), then read by the import worker in batches
 * (contact-imports.worker.ts). What GET shows is the job's row, which each batch updates in its transaction.
 */
export function createContactImportService(deps: ContactImportServiceDeps) {
  const { repo, clock } = deps;

  /** The upload's options against the header and the project: what the job does with each row. */
  async function planOf(
    projectId: string,
    header: string[],
    fields: Partial<Record<string, string>>,
  ): Promise<ImportPlan> {
    const map = parseJsonField<ColumnMapInput>('column_map', fields.column_map);
    if (map !== undefined && (typeof map !== 'object' || map === null || Array.isArray(map))) {
      throw invalidParam('column_map', 'column_map must be an object: { "email": "<column>", … }.');
    }
    const onConflict = CONFLICTS[fields.on_conflict ?? 'update'];
    if (onConflict === undefined) {
      throw invalidParam(
        'on_conflict',
        `on_conflict is update (or upsert) or skip, not '${fields.on_conflict}'.`,
      );
    }
    const segmentIds = segmentIdsOf(parseJsonField('segments', fields.segments));
    const topics = topicsOf(parseJsonField('topics', fields.topics));
    for (const id of segmentIds) {
      const segment = isId('seg', id) ? await deps.segments.find(projectId, id) : undefined;
      if (!segment) throw notFound('segment', id);
      if (segment.filter !== null) {
        throw invalidParam(
          'segments',
          `The segment '${id}' is a filter: its members are the contacts that match it, not imported into it.`,
          'segment_is_filter',
        );
      }
    }
    for (const { topicId } of topics) {
      if (!isId('top', topicId) || !(await deps.topics.find(projectId, topicId)))
        throw notFound('topic', topicId);
    }
    const declared = await deps.properties.all(projectId);
    return {
      columns: resolveColumns(header, map, declared),
      width: header.length,
      onConflict,
      segmentIds: [...new Set(segmentIds)],
      topics,
    };
  }

  return {
    /**
     * Reads an upload (multipart/form-data) as it arrives, its CSV kept in pieces and checked, and its options
     * against the header and the project: the job to store. Anything refused (not CSV, a bad map) removes
     * what was kept, so nothing of it stays.
     */
    async prepare(
      projectId: string,
      headers: IncomingHttpHeaders,
      body: NodeJS.ReadableStream,
    ): Promise<ContactImportRecord> {
      const id = newId('cimp');
      try {
        const upload = await readUpload(headers, body, (seq, bytes) => repo.storePiece(id, seq, bytes));
        const plan = await planOf(projectId, upload.header, upload.fields);
        return {
          id,
          projectId,
          status: 'queued',
          plan,
          bytes: upload.bytes,
          total: upload.rows,
          counts: { read: 0, created: 0, updated: 0, skipped: 0, failed: 0 },
          errors: [],
          failure: null,
          createdAt: clock.now().toISOString(),
          startedAt: null,
          completedAt: null,
        };
      } catch (error) {
        await repo.removePieces(id);
        throw error;
      }
    },

    /** Stores the job; the worker is woken once it commits. */
    async create(transaction: Transaction, record: ContactImportRecord): Promise<ContactImportView> {
      await repo.insert(record, transaction);
      transaction.afterCommit(deps.wake);
      return toImportView(record);
    },

    /** A job whose transaction failed leaves no CSV behind. */
    discard: (record: ContactImportRecord) => repo.removePieces(record.id),

    async get(projectId: string, id: string): Promise<ContactImportView> {
      const record = isId('cimp', id) ? await repo.find(projectId, id) : undefined;
      if (!record) throw notFound('contact import', id);
      return toImportView(record);
    },

    async list(projectId: string, page: PageRequest, status?: ImportStatus) {
      const result = await repo.list(projectId, page, status);
      return { items: result.items.map(toImportView), hasMore: result.hasMore };
    },
  };
}

export type ContactImportService = ReturnType<typeof createContactImportService>;
