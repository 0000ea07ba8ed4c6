import { Readable } from 'node:stream';
import type { Kysely } from 'kysely';
import type { Database } from '../../db/schema.ts';
import { inTransaction, type Transaction } from '../../db/transaction.ts';
import { letOthersRun } from '../../lib/byte-chunks.ts';
import { type Clock, nextUpdatedAt } from '../../lib/clock.ts';
import { newId } from '../../lib/ids.ts';
import type { EventService } from '../events/events.service.ts';
import type { ContactPropertyRecord, ContactPropertyRepo } from './contact-properties.repo.ts';
import { csvError, type ImportedRow, newCsvParser, readRow } from './contact-imports.csv.ts';
import type {
  ContactImportRecord,
  ContactImportRepo,
  ImportCounts,
  ImportError,
} from './contact-imports.repo.ts';
import type { ContactRecord, ContactRepo } from './contacts.repo.ts';
import { contactEventData, toContactView } from './contacts.service.ts';
import { type ContactChange, type ContactTriggers, noContactTriggers } from './contact-triggers.ts';

// An import's job: its CSV read back from its pieces as a stream (a piece at a time), parsed again, and its
// rows written in batches, each batch in a short transaction of its own with the job's progress (so a job
// cut short resumes after its last committed batch, with no row written twice nor missed). A row that
// cannot be imported is counted and, among the first MAX_ERRORS, reported with its number and reason.

/** Rows per batch: one transaction each, a few milliseconds long. */
export const IMPORT_BATCH_ROWS = 500;
/** Failed rows reported with their reason (all are counted). */
export const MAX_ERRORS = 100;

export interface ImportJobDeps {
  db: Kysely<Database>;
  repo: ContactImportRepo;
  contacts: Pick<ContactRepo, 'findByEmails' | 'insertMany' | 'update'>;
  properties: Pick<ContactPropertyRepo, 'all'>;
  segments: {
    addContacts(
      segmentIds: readonly string[],
      contactIds: readonly string[],
      at: string,
      transaction: Transaction,
    ): Promise<void>;
    idsOfMany(contactIds: readonly string[], transaction: Transaction): Promise<Map<string, string[]>>;
  };
  topics: {
    findMany(
      projectId: string,
      ids: readonly string[],
      transaction: Transaction,
    ): Promise<Array<{ id: string; defaultSubscription: 'opt_in' | 'opt_out' }>>;
    choicesFor(
      topicId: string,
      contactIds: readonly string[],
      transaction: Transaction,
    ): Promise<Map<string, 'opt_in' | 'opt_out'>>;
    chooseFor(
      contactIds: readonly string[],
      choices: ReadonlyArray<{ topicId: string; subscription: 'opt_in' | 'opt_out' }>,
      at: string,
      transaction: Transaction,
    ): Promise<void>;
  };
  events: Pick<EventService, 'emitIn'>;
  clock: Clock;
  /** What the batch's contacts created, added to segments, subscribed or unsubscribed do to automations. */
  triggers?: ContactTriggers | undefined;
}

interface Batch {
  rows: Array<{ number: number; row: ImportedRow }>;
  failures: ImportError[];
}

/** The CSV's pieces, read one at a time as they are needed. */
function piecesOf(repo: ContactImportRepo, id: string): Readable {
  return Readable.from(
    (async function* () {
      for (let seq = 0; ; seq += 1) {
        const piece = await repo.readPiece(id, seq);
        if (!piece) return;
        yield piece;
      }
    })(),
  );
}

/** A row's fields over a contact's (a new one when `current` is undefined); undefined fields keep theirs. */
function merged(current: ContactRecord, row: ImportedRow, kept: ReadonlySet<string>): ContactRecord {
  const values: ContactRecord['values'] = {};
  for (const [id, value] of Object.entries(current.values)) if (kept.has(id)) values[id] = value;
  for (const [id, value] of row.values) values[id] = value;
  return {
    ...current,
    firstName: row.firstName ?? current.firstName,
    lastName: row.lastName ?? current.lastName,
    unsubscribed: row.unsubscribed ?? current.unsubscribed,
    values,
  };
}

export function createImportJob(deps: ImportJobDeps) {
  const { repo, clock } = deps;
  const triggers = deps.triggers ?? noContactTriggers;

  /**
   * What the batch will change for automations, read before it is written: the contacts created, those it adds
   * to each segment (not in it before), subscribes to each topic (opted out before, by choice or by the
   * topic's default), and unsubscribes.
   */
  async function changesOf(
    projectId: string,
    plan: ContactImportRecord['plan'],
    created: ReadonlyMap<string, ContactRecord>,
    updated: ReadonlyMap<string, ContactRecord>,
    existing: ReadonlyMap<string, ContactRecord>,
    transaction: Transaction,
  ): Promise<Array<[ContactChange, string[]]>> {
    const createdIds = [...created.values()].map((record) => record.id);
    const updatedIds = [...updated.values()].map((record) => record.id);
    const touched = [...createdIds, ...updatedIds];
    const changes: Array<[ContactChange, string[]]> = [[{ kind: 'created' }, createdIds]];
    const segmentsBefore =
      plan.segmentIds.length === 0 ? new Map() : await deps.segments.idsOfMany(updatedIds, transaction);
    for (const segmentId of plan.segmentIds) {
      const added = updatedIds.filter((id) => !segmentsBefore.get(id)?.includes(segmentId));
      changes.push([{ kind: 'added_to_segment', segmentId }, [...createdIds, ...added]]);
    }
    const optIns = plan.topics.filter((choice) => choice.subscription === 'opt_in');
    const defaults = new Map(
      (
        await deps.topics.findMany(
          projectId,
          optIns.map((choice) => choice.topicId),
          transaction,
        )
      ).map((topic) => [topic.id, topic.defaultSubscription]),
    );
    for (const { topicId } of optIns) {
      const before = await deps.topics.choicesFor(topicId, touched, transaction);
      const subscribed = touched.filter((id) => (before.get(id) ?? defaults.get(topicId)) !== 'opt_in');
      changes.push([{ kind: 'topic_subscribed', topicId }, subscribed]);
    }
    const unsubscribed = [...updated.values()].filter(
      (record) => record.unsubscribed && existing.get(record.email)?.unsubscribed === false,
    );
    changes.push([{ kind: 'unsubscribed' }, unsubscribed.map((record) => record.id)]);
    return changes;
  }

  /** Writes a batch and the job's progress in one transaction; false when the job is no longer ours. */
  async function writeBatch(
    job: ContactImportRecord,
    workerId: string,
    leaseMs: number,
    batch: Batch,
    counts: ImportCounts,
    errors: ImportError[],
    declared: readonly ContactPropertyRecord[],
  ): Promise<boolean> {
    const { plan, projectId } = job;
    const kept = new Set(declared.map((property) => property.id));
    return inTransaction(deps.db, async (transaction) => {
      const now = clock.now().toISOString();
      const emails = [...new Set(batch.rows.map(({ row }) => row.email))];
      const existing = new Map(
        (await deps.contacts.findByEmails(projectId, emails, transaction)).map((record) => [
          record.email,
          record,
        ]),
      );
      const created = new Map<string, ContactRecord>();
      const updated = new Map<string, ContactRecord>();
      const next = { ...counts, read: counts.read + batch.rows.length + batch.failures.length };
      next.failed += batch.failures.length;
      for (const { row } of batch.rows) {
        const fresh = created.get(row.email);
        const current = fresh ?? updated.get(row.email) ?? existing.get(row.email);
        if (current === undefined) {
          const record: ContactRecord = {
            id: newId('con'),
            projectId,
            email: row.email,
            firstName: null,
            lastName: null,
            unsubscribed: false,
            values: {},
            createdAt: now,
            updatedAt: now,
          };
          created.set(row.email, merged(record, row, kept));
          next.created += 1;
        } else if (plan.onConflict === 'skip') {
          next.skipped += 1;
        } else if (fresh) {
          // The same address twice in one batch: the later row updates the contact the earlier one made.
          created.set(row.email, merged(fresh, row, kept));
          next.updated += 1;
        } else {
          updated.set(row.email, {
            ...merged(current, row, kept),
            updatedAt: nextUpdatedAt(clock, current.updatedAt),
          });
          next.updated += 1;
        }
      }
      const inserted = await deps.contacts.insertMany([...created.values()], transaction);
      // An address another request created since the read above stays as that request made it.
      for (const record of created.values()) {
        if (!inserted.has(record.id)) {
          created.delete(record.email);
          next.created -= 1;
          next.skipped += 1;
        }
      }
      for (const record of updated.values()) await deps.contacts.update(record, transaction);
      const touched = [...created.values(), ...updated.values()].map((record) => record.id);
      const changes = await changesOf(projectId, plan, created, updated, existing, transaction);
      await deps.segments.addContacts(plan.segmentIds, touched, now, transaction);
      await deps.topics.chooseFor(touched, plan.topics, now, transaction);
      for (const [change, ids] of changes) await triggers.changedIn(transaction, projectId, change, ids);
      const segmentsOf = await deps.segments.idsOfMany(
        [...updated.values()].map((record) => record.id),
        transaction,
      );
      const eventOf = (kind: 'contact.created' | 'contact.updated', record: ContactRecord) => ({
        projectId,
        kind,
        data: contactEventData(
          toContactView(record, declared),
          kind === 'contact.created' ? [...plan.segmentIds].sort() : (segmentsOf.get(record.id) ?? []),
        ),
      });
      await deps.events.emitIn(transaction, [
        ...[...created.values()].map((record) => eventOf('contact.created', record)),
        ...[...updated.values()].map((record) => eventOf('contact.updated', record)),
      ]);
      for (const failure of batch.failures) if (errors.length < MAX_ERRORS) errors.push(failure);
      const until = new Date(clock.now().getTime() + leaseMs).toISOString();
      if (!(await repo.progress(job.id, workerId, next, errors, until, transaction))) {
        // Rolls the batch back: the job is another worker's now.
        throw new LostLease();
      }
      Object.assign(counts, next);
      return true;
    }).catch((error: unknown) => {
      if (error instanceof LostLease) return false;
      throw error;
    });
  }

  return {
    /**
     * Runs a claimed job to its end, or until `signal` (the worker stops) or a lost lease: resumes after the
     * rows its last committed batch read. Answers whether it finished.
     */
    async run(
      job: ContactImportRecord,
      workerId: string,
      leaseMs: number,
      signal: AbortSignal,
    ): Promise<boolean> {
      const declared = await deps.properties.all(job.projectId);
      const counts = { ...job.counts };
      const errors = [...job.errors];
      const resumeAfter = counts.read;
      let batch: Batch = { rows: [], failures: [] };
      let number = 0;
      const flush = async () => {
        const held = await writeBatch(job, workerId, leaseMs, batch, counts, errors, declared);
        batch = { rows: [], failures: [] };
        return held;
      };
      try {
        let header = true;
        for await (const record of piecesOf(repo, job.id).pipe(newCsvParser()) as AsyncIterable<string[]>) {
          if (header) {
            header = false;
            continue;
          }
          number += 1;
          if (number <= resumeAfter) continue;
          const read = readRow(record, job.plan.columns, job.plan.width);
          if (read.ok) batch.rows.push({ number, row: read.row });
          else batch.failures.push({ row: number, reason: read.reason });
          if (batch.rows.length + batch.failures.length >= IMPORT_BATCH_ROWS) {
            if (!(await flush())) return false;
            if (signal.aborted) return false;
            // The parse and the statements may all settle as microtasks: the event loop gets its turn here,
            // so the API answers while a long import runs.
            await letOthersRun();
          }
        }
        if (batch.rows.length + batch.failures.length > 0 && !(await flush())) return false;
      } catch (error) {
        if ((error as { code?: string }).code?.startsWith('CSV_')) {
          await repo.finish(job.id, workerId, {
            status: 'failed',
            failure: csvError(error).message,
            at: clock.now().toISOString(),
          });
          await repo.removePieces(job.id);
          return true;
        }
        throw error;
      }
      if (
        !(await repo.finish(job.id, workerId, {
          status: 'completed',
          failure: null,
          at: clock.now().toISOString(),
        }))
      ) {
        return false;
      }
      await repo.removePieces(job.id);
      return true;
    },
  };
}

class LostLease extends Error {}

export type ImportJobRunner = ReturnType<typeof createImportJob>;
