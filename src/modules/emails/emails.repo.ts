import { CompiledQuery, type Kysely, sql } from 'kysely';
import { instantOf } from '../../lib/clock.ts';
import { idAt } from '../../lib/ids.ts';
import { type PruneTarget, pruneTarget } from '../../db/prune.ts';
import { createMessagePieces, keptInPieces } from '../../db/message-pieces.ts';
import { type ByteChunks, totalBytes } from '../../lib/byte-chunks.ts';
import type { EmailListFilters } from './emails.schemas.ts';
import type { Engine } from '../../db/connection.ts';
import { writesInWith } from '../../db/engine/sql.ts';
import { mapPage, type Page, type PageRequest, pageOfQuery } from '../../db/pagination.ts';
import type { Database, Row } from '../../db/schema.ts';
import {
  attachmentsOf,
  EMAIL_COLUMNS,
  emailRow,
  type EmailAttachment,
  type EmailRecord,
  INSERT_CHUNK,
  type NewAttachment,
  type NewEmail,
  queued,
  toEmailRecord,
} from './email-rows.ts';
import {
  createQuotaCounter,
  FIRST_PART_COUNTS,
  GUARDED_COUNTS,
  overDailyLimit,
  type QuotaCount,
  quotaDay,
  quotaUsed,
  type QuotaRow,
  type QuotaTotal,
} from './fair-queue.repo.ts';
import type { RecipientRepo } from './recipients.repo.ts';
import {
  columnArrays,
  inChunks,
  inColumnOrder,
  joinedStatements,
  placeholders,
  textsByShape,
  unnestedRows,
} from '../../db/sql-text.ts';
import { createDeferredWake, QUEUE_CHANNELS } from '../../queue/notifier.ts';
import type { Transaction } from '../../db/transaction.ts';
import { CancelRefused, DailyLimitReached, GuardFound, RescheduleRefused } from './write-refusals.ts';

// Re-exported: callers know an email's shapes as the emails repository's.
export {
  attachmentsOf,
  EMAIL_COLUMNS,
  type EmailAttachment,
  type EmailRecord,
  type NewEmail,
  type NewRecipient,
  toEmailRecord,
} from './email-rows.ts';

export type RecipientRow = Row<'email_recipients'>;

/**
 * The emails' files and submitted messages, in `transaction`: one statement per file (a statement holding many
 * files would hold them all in memory at once), a large one already in its pieces.
 */
async function insertFiles(emails: readonly NewEmail[], transaction: Transaction): Promise<void> {
  const trx = transaction.db;
  for (const email of emails) {
    for (const [position, attachment] of email.attachments.entries()) {
      const inPieces = attachment.piecesKey !== undefined;
      await trx
        .insertInto('email_attachments')
        .values({
          email_id: email.id,
          position,
          project_id: email.projectId,
          filename: attachment.filename,
          content_type: attachment.contentType,
          content_id: attachment.contentId,
          size: attachment.size,
          content: inPieces ? new Uint8Array(0) : Buffer.concat(attachment.content),
          pieces_key: attachment.piecesKey ?? null,
        })
        .execute();
    }
  }

  // A submitted message per statement too, for the same reason; a large one is already in its pieces.
  for (const email of emails) {
    if (email.submitted === undefined) continue;
    const inPieces = email.submittedPiecesKey !== undefined;
    await trx
      .insertInto('email_submissions')
      .values({
        email_id: email.id,
        project_id: email.projectId,
        message_id: email.messageId,
        raw: inPieces ? new Uint8Array(0) : Buffer.concat(email.submitted),
        pieces_key: email.submittedPiecesKey ?? null,
        created_at: email.createdAt,
      })
      .execute();
  }
}

/** The project and day an email is counted on, as one key. */
const countKey = (email: NewEmail): string => `${email.projectId} ${quotaDay(email.createdAt)}`;

/** `recipients`: the recipients' repository, which writes their rows in the same transaction as the email's. */
export function createEmailRepo(
  db: Kysely<Database>,
  engine: Engine,
  recipients: Pick<
    RecipientRepo,
    'insertAccepted' | 'acceptedInserts' | 'acceptedInsert' | 'cancelWaiting' | 'rescheduleWaiting'
  >,
) {
  const pieces = createMessagePieces(db);
  // The accepting INSERTs, written as SQL text once per number of rows (and, for recipients, which rows are
  // due `q`, waiting `w` or suppressed `s`): built with the query builder they cost more CPU than running.
  const emailsInsert = textsByShape((rows) => {
    const slot = placeholders(engine);
    const row = () => `(${EMAIL_COLUMNS.map(slot).join(', ')})`;
    return `INSERT INTO emails (${EMAIL_COLUMNS.join(', ')}) VALUES ${Array.from({ length: Number(rows) }, row).join(', ')}`;
  });
  const quota = createQuotaCounter(engine);
  // PostgreSQL: the accepting INSERT inserting its rows only when `condition` holds (an earlier part of the
  // statement let it), its rows as one array per column (unnestedRows): one text per condition.
  const emailsOnlyWhenText = textsByShape(
    (condition) =>
      `INSERT INTO emails (${EMAIL_COLUMNS.join(', ')}) SELECT ${EMAIL_COLUMNS.map((column) => `v.${column}`).join(', ')} FROM ${unnestedRows(
        EMAIL_COLUMNS,
        { recipient_count: 'integer', template_version: 'integer' },
      )} WHERE ${condition}`,
  );
  const emailsOnlyWhen = (emails: readonly NewEmail[], condition: string) =>
    CompiledQuery.raw(emailsOnlyWhenText(condition), columnArrays(EMAIL_COLUMNS, emails.map(emailRow)));
  const joined = joinedStatements();

  /**
   * PostgreSQL: whether `insert` writes these emails with one statement (the emails, their recipients and the
   * daily count as the WITH parts of one INSERT): one round trip instead of three. Not for emails with files
   * or a submitted message (a statement each, so as not to hold them all at once), nor more rows than one
   * INSERT takes.
   */
  const inOneStatement = (emails: readonly NewEmail[]): boolean =>
    writesInWith(engine) &&
    emails.length <= INSERT_CHUNK &&
    emails.every((email) => email.attachments.length === 0 && email.submitted === undefined) &&
    emails.reduce((sum, email) => sum + email.recipients.length, 0) <= INSERT_CHUNK;
  // Sending workers in other processes, woken after the accepting commit (notifier.ts says why so).
  const wakeOtherProcesses = createDeferredWake(db, engine, QUEUE_CHANNELS.sending);

  return {
    /**
     * Retention: the stored MIME of emails accepted before `cutoff`, and their attachments once every
     * recipient is done (the email itself and its recipients stay).
     */
    pruneTargets(cutoff: Date): PruneTarget[] {
      const before = idAt('msg', cutoff);
      return [
        pruneTarget(db, 'email_raw', 'email_id', sql<boolean>`email_id < ${before}`),
        pieces.pruneTarget('capture', before),
        pruneTarget(
          db,
          'email_attachments',
          'email_id',
          sql<boolean>`email_id < ${before} AND email_id IN (SELECT id FROM emails
            WHERE id < ${before} AND status NOT IN ('queued', 'delayed', 'scheduled'))`,
        ),
        // A file's pieces once no row names them: its row was pruned above, or its email was never stored.
        pieces.pruneTarget(
          'attachment',
          before,
          sql<boolean>`NOT EXISTS (SELECT 1 FROM email_attachments
            WHERE email_attachments.pieces_key = message_pieces.owner)`,
        ),
      ];
    },

    /**
     * Stores emails and their recipient rows in `transaction`, counting the recipients against the daily
     * limit (0: none) and queueing the due ones fairly. Either every email is stored or none is. The emails
     * may be of many projects (sends accepted together): still one INSERT per table, and one count per project
     * and day, whose limit refuses them all (DailyLimitReached) when one project passes it.
     */
    async insert(
      emails: NewEmail[],
      options: {
        dailyLimit: number;
        /** `false`: not counted against the daily numbers (a broadcast's copies). */
        counted?: boolean;
        /**
         * A query (without `*`) that, when it finds any row, has nothing stored (GuardFound thrown), run as
         * part of the same statement; only where `guardsInOneStatement` says so.
         */
        unlessFound?: CompiledQuery | undefined;
      },
      transaction: Transaction,
    ): Promise<void> {
      if (emails.length === 0) return;
      const counts = new Map<string, QuotaCount>();
      let due = 0;
      for (const email of emails) {
        const recipients = queued(email.recipients).length;
        if (email.scheduledAt === null) due += recipients;
        const count = counts.get(countKey(email));
        if (count) count.recipients += recipients;
        else
          counts.set(countKey(email), {
            projectId: email.projectId,
            day: quotaDay(email.createdAt),
            recipients,
          });
      }

      const trx = transaction.db;
      const limited = options.dailyLimit > 0;
      // In one order everywhere: two processes' groups lock the same count rows (PostgreSQL) in the same
      // order, never each waiting for the other's.
      const ordered = [...counts.values()].sort((a, b) =>
        a.projectId === b.projectId ? a.day.localeCompare(b.day) : a.projectId < b.projectId ? -1 : 1,
      );
      const emailsStatement = (chunk: NewEmail[]) =>
        CompiledQuery.raw(
          emailsInsert(String(chunk.length)),
          chunk.flatMap((email) => inColumnOrder(EMAIL_COLUMNS, emailRow(email))),
        );

      let totals: QuotaTotal[];
      // A broadcast's copies (not counted) go the usual way: the one statement holds a count.
      const oneStatement = options.counted !== false && inOneStatement(emails);
      const guard = options.unlessFound;
      if (guard && !oneStatement) throw new Error('A guard is only run within the one accepting statement.');
      if (oneStatement && (limited || guard)) {
        // The count first, made only within the limit; the emails and their recipients inserted only when
        // every count was made (the statement's parts see what the others return). With one count, a refused
        // group writes nothing, so the statement may be a transaction of its own (insertsInOneStatement);
        // with more, a count made beside one refused is undone by the rollback DailyLimitReached brings.
        // A guard goes before the count, which is then made only when the guard finds nothing (and, with a
        // limit, within it).
        const counting = quota.statement(
          ordered,
          true,
          limited ? options.dailyLimit : undefined,
          guard ? 'NOT EXISTS (SELECT 1 FROM part0)' : undefined,
        );
        const condition = `(SELECT COUNT(*) FROM ${guard ? 'part1' : 'part0'}) = ${ordered.length}`;
        const parts = [
          ...(guard ? [guard] : []),
          counting,
          emailsOnlyWhen(emails, condition),
          recipients.acceptedInsert(emails, condition),
        ];
        const { rows } = await trx.executeQuery<QuotaRow>(
          joined(
            parts.map((query) => query.sql).join('\n'),
            parts,
            guard ? GUARDED_COUNTS : FIRST_PART_COUNTS,
          ),
        );
        if (rows.some((row) => row.project_id === null)) throw new GuardFound();
        totals = quota.totalsOf(ordered, rows);
        const refused = ordered.find(
          (count) => !rows.some((row) => row.project_id === count.projectId && row.day === count.day),
        );
        if (refused) throw new DailyLimitReached(await quotaUsed(trx, refused.projectId, refused.day));
      } else if (oneStatement) {
        // The emails, their recipients, then the count (its rows locked only for the statement's end).
        const [recipientsStatement] = [...recipients.acceptedInserts(emails)];
        const parts = [emailsStatement(emails), ...(recipientsStatement ? [recipientsStatement] : [])];
        const counting = quota.statement(ordered, limited);
        const { rows } = await trx.executeQuery<QuotaRow>(
          // The texts are the shape: each is kept once per shape by its repository, so the key is exact.
          joined([...parts, counting].map((query) => query.sql).join('\n'), parts, counting),
        );
        totals = quota.totalsOf(ordered, rows);
      } else {
        await inChunks(emails, INSERT_CHUNK, (chunk) => trx.executeQuery(emailsStatement(chunk)));
        await insertFiles(emails, transaction);
        await recipients.insertAccepted(emails, transaction);
        // Last, so the count rows are locked (PostgreSQL) only for the moment before the commit.
        totals = options.counted === false ? [] : await quota.count(ordered, limited, transaction);
      }
      const over = totals.find((counted) => overDailyLimit(counted.total, options.dailyLimit));
      if (over) throw new DailyLimitReached(over.total - over.recipients);
      if (due > 0) transaction.afterCommit(wakeOtherProcesses);
    },

    /**
     * PostgreSQL: whether `insert` writes these emails with a single statement (which a daily limit refuses
     * whole, writing nothing), so that with nothing else to write it can run autocommitted, as a transaction
     * of its own.
     */
    insertsInOneStatement: (emails: readonly NewEmail[], options: { dailyLimit: number }): boolean =>
      inOneStatement(emails) &&
      // One count at most: a statement may make one count and refuse another, which only a rollback undoes.
      (options.dailyLimit <= 0 || new Set(emails.map(countKey)).size === 1),

    /**
     * PostgreSQL: whether `insert` can run a guard (`unlessFound`) in the one statement that writes these
     * emails: a part before the count, which it holds back (and with the count every row).
     */
    guardsInOneStatement: (emails: readonly NewEmail[]): boolean => inOneStatement(emails),

    /**
     * Writes the large content of emails — a submitted message, or a file, larger than one piece — to its
     * pieces, before the transaction that stores the emails (see db/message-pieces.ts); the emails that
     * `insert` then stores, naming their pieces. Content already in pieces is left as it is.
     */
    async keepLargeContentInPieces(emails: NewEmail[]): Promise<NewEmail[]> {
      const kept: NewEmail[] = [];
      for (const email of emails) {
        let submittedPiecesKey = email.submittedPiecesKey;
        if (
          submittedPiecesKey === undefined &&
          email.submitted !== undefined &&
          keptInPieces(totalBytes(email.submitted))
        ) {
          submittedPiecesKey = `submission:${email.id}`;
          await pieces.write(submittedPiecesKey, email.submitted);
        }
        const attachments: NewAttachment[] = [];
        for (const [position, attachment] of email.attachments.entries()) {
          if (attachment.piecesKey !== undefined || !keptInPieces(attachment.size))
            attachments.push(attachment);
          else {
            const piecesKey = `attachment:${email.id}:${position}`;
            await pieces.write(piecesKey, attachment.content);
            attachments.push({ ...attachment, piecesKey });
          }
        }
        kept.push({ ...email, submittedPiecesKey, attachments });
      }
      return kept;
    },

    /** Removes the pieces of emails that were not stored after all. */
    async removePieces(emails: NewEmail[]): Promise<void> {
      for (const email of emails) {
        if (email.submittedPiecesKey !== undefined) await pieces.remove(email.submittedPiecesKey);
        for (const attachment of email.attachments) {
          if (attachment.piecesKey !== undefined) await pieces.remove(attachment.piecesKey);
        }
      }
    },

    /** In `transaction` when given (one that has just changed it). */
    async find(projectId: string, id: string, transaction?: Transaction): Promise<EmailRecord | undefined> {
      const row = await (transaction?.db ?? db)
        .selectFrom('emails')
        .selectAll()
        .where('project_id', '=', projectId)
        .where('id', '=', id)
        .executeTakeFirst();
      return row && toEmailRecord(row);
    },

    /** Recipients counted against the project's daily limit on `day` (YYYY-MM-DD) so far. */
    usedOn: (projectId: string, day: string): Promise<number> => quotaUsed(db, projectId, day),

    /**
     * The email an SMTP client submitted with this Message-ID since `since`, if any: a client that retries
     * after a lost 250 gets it back instead of a second email.
     */
    async submittedSince(projectId: string, messageId: string, since: string): Promise<string | undefined> {
      const row = await db
        .selectFrom('email_submissions')
        .select('email_id')
        .where('project_id', '=', projectId)
        .where('message_id', '=', messageId)
        .where('created_at', '>=', since)
        .executeTakeFirst();
      return row?.email_id;
    },

    /** An email's attachments without their content (for the API); in `transaction` when given. */
    async attachments(emailId: string, transaction?: Transaction): Promise<EmailAttachment[]> {
      return (await attachmentsOf(transaction?.db ?? db, [emailId], { content: false })).get(emailId) ?? [];
    },

    /** An email's attachment at `position`, with its content. */
    async attachmentAt(emailId: string, position: number): Promise<Required<EmailAttachment> | undefined> {
      const all = (await attachmentsOf(db, [emailId], { content: true, position })).get(emailId);
      return all?.[0] as Required<EmailAttachment> | undefined;
    },

    async list(
      projectId: string,
      page: PageRequest,
      filters: EmailListFilters = {},
    ): Promise<Page<EmailRecord>> {
      // LIKE patterns: the user's text matches as itself, wildcards included.
      const literal = (text: string) => text.toLowerCase().replace(/[\\%_]/g, (char) => `\\${char}`);
      let query = db.selectFrom('emails').selectAll().where('project_id', '=', projectId);
      if (filters.status) query = query.where('status', '=', filters.status);
      if (filters.since) query = query.where('created_at', '>=', instantOf(filters.since).toISOString());
      if (filters.until) query = query.where('created_at', '<', instantOf(filters.until).toISOString());
      if (filters.tag) {
        // Tags are stored as JSON of [A-Za-z0-9_-] names and values: `"name":"value"` is exact.
        const [name, value] = filters.tag.split(':');
        query = query.where('tags', 'like', `%"${name}":"${value}"%`);
      }
      if (filters.recipient) {
        const pattern = `%${literal(filters.recipient)}%`;
        query = query.where((eb) =>
          eb.exists(
            eb
              .selectFrom('email_recipients')
              .select(sql`1`.as('one'))
              .whereRef('email_recipients.email_id', '=', 'emails.id')
              .where(sql<boolean>`lower(email_recipients.address) LIKE ${pattern} ESCAPE '\\'`),
          ),
        );
      }
      return mapPage(await pageOfQuery(query, page), toEmailRecord);
    },

    /** In `transaction` when given. */
    async recipients(projectId: string, emailId: string, transaction?: Transaction): Promise<RecipientRow[]> {
      return (transaction?.db ?? db)
        .selectFrom('email_recipients')
        .selectAll()
        .where('project_id', '=', projectId)
        .where('email_id', '=', emailId)
        .orderBy('position')
        .execute();
    },

    /** The captured MIME, as the chunks it is kept in (never joined: lib/byte-chunks.ts). */
    async raw(projectId: string, emailId: string): Promise<ByteChunks | undefined> {
      const row = await db
        .selectFrom('email_raw')
        .select(['raw', 'pieces_key'])
        .where('project_id', '=', projectId)
        .where('email_id', '=', emailId)
        .executeTakeFirst();
      if (!row) return undefined;
      return row.pieces_key === null ? [Buffer.from(row.raw, 'utf8')] : pieces.read(row.pieces_key);
    },

    /**
     * Cancels a scheduled email whose time has not come, in `transaction`: every recipient must still be
     * waiting (not yet promoted into the queue, so no worker can hold it). When that no longer holds it
     * throws CancelRefused, and the transaction's rollback undoes the recipients already cancelled.
     */
    async cancel(projectId: string, emailId: string, now: string, transaction: Transaction): Promise<void> {
      const cancelled = await recipients.cancelWaiting(projectId, emailId, now, transaction);
      const email = await transaction.db
        .updateTable('emails')
        .set({ status: 'cancelled', updated_at: now })
        .where('id', '=', emailId)
        .where('project_id', '=', projectId)
        .where('status', '=', 'scheduled')
        .where('recipient_count', '=', cancelled)
        .executeTakeFirst();
      // Some recipient was already due (or the email is not scheduled): nothing may be cancelled.
      if (Number(email.numUpdatedRows) !== 1) throw new CancelRefused();
    },

    /**
     * Moves a scheduled email whose time has not come to `at`, in `transaction`: as for a cancel, every
     * recipient not suppressed must still be waiting; when that no longer holds it throws RescheduleRefused,
     * and the rollback puts back the recipients already moved.
     */
    async reschedule(
      projectId: string,
      emailId: string,
      at: string,
      now: string,
      transaction: Transaction,
    ): Promise<void> {
      const moved = await recipients.rescheduleWaiting(projectId, emailId, at, now, transaction);
      const email = await transaction.db
        .updateTable('emails')
        .set({ scheduled_at: at, updated_at: now })
        .where('id', '=', emailId)
        .where('project_id', '=', projectId)
        .where('status', '=', 'scheduled')
        .where('scheduled_at', '>', now)
        .where(
          (eb) =>
            eb
              .selectFrom('email_recipients')
              .select((inner) => inner.fn.countAll<number>().as('count'))
              .where('email_id', '=', emailId)
              .where('project_id', '=', projectId)
              .where('status', '!=', 'suppressed'),
          '=',
          moved,
        )
        .executeTakeFirst();
      // Some recipient was already due (or the email is not scheduled): nothing may move.
      if (moved === 0 || Number(email.numUpdatedRows) !== 1) throw new RescheduleRefused();
    },
  };
}

export type EmailRepo = ReturnType<typeof createEmailRepo>;
