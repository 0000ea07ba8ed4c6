import { CompiledQuery, type Kysely } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { inChunks, placeholders, textsByShape } from '../../db/sql-text.ts';
import { mapPage, type Page, type PageRequest, pageOfQuery } from '../../db/pagination.ts';
import type { Database, Row, SuppressionReason } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import { newId } from '../../lib/ids.ts';

export interface SuppressionRecord {
  id: string;
  projectId: string;
  address: string;
  reason: SuppressionReason;
  emailId: string | null;
  detail: string | null;
  createdAt: string;
}

export type NewSuppression = Omit<SuppressionRecord, 'id'>;

const toRecord = (row: Row<'suppressions'>): SuppressionRecord => ({
  id: row.id,
  projectId: row.project_id,
  address: row.address,
  reason: row.reason,
  emailId: row.email_id,
  detail: row.detail,
  createdAt: row.created_at,
});

/** Addresses compare case-insensitively: stored and looked up lowercased. */
export const normalizeAddress = (address: string): string => address.trim().toLowerCase();

/** The key of an address of a project in `matchingIn`'s answer. */
export const suppressionKey = (projectId: string, address: string): string =>
  `${projectId} ${normalizeAddress(address)}`;

// Read in bounded statements, far below the bind-parameter limits.
const LOOKUP_CHUNK = 500;

/** The suppressions table (a send, or an attempt's outcome, adds entries in its own transaction). */
export function createSuppressionRepo(db: Kysely<Database>, engine: Engine) {
  // Written as SQL text once per number of projects and addresses: every accepted send reads it.
  const lookup = textsByShape((shape) => {
    const [projects, addresses] = shape.split(':').map(Number);
    const slot = placeholders(engine);
    const list = (count: number) => Array.from({ length: count }, slot).join(', ');
    return `SELECT * FROM suppressions WHERE project_id IN (${list(projects!)}) AND address IN (${list(addresses!)})`;
  });

  // PostgreSQL: the same lookup as part of another statement (a prepared one: naming no columns by `*`,
  // postgres.ts says why), the projects and addresses as two arrays, so that its text is the same for any
  // number of them.
  const FOUND =
    'SELECT id FROM suppressions WHERE project_id = ANY($1::text[]) AND address = ANY($2::text[])';

  /**
   * The entries among these addresses in any of these projects (sends of many projects accepted together
   * read them at once), by `suppressionKey`; an address listed in one of the projects only counts there.
   * In `transaction` when given (the one a send is written in).
   */
  async function matchingIn(
    projectIds: readonly string[],
    addresses: readonly string[],
    transaction?: Transaction,
  ): Promise<Map<string, SuppressionRecord>> {
    const via = transaction?.db ?? db;
    const projects = [...new Set(projectIds)];
    const wanted = [...new Set(addresses.map(normalizeAddress))];
    const found = new Map<string, SuppressionRecord>();
    await inChunks(wanted, LOOKUP_CHUNK, async (chunk) => {
      const { rows } = await via.executeQuery<Row<'suppressions'>>(
        CompiledQuery.raw(lookup(`${projects.length}:${chunk.length}`), [...projects, ...chunk]),
      );
      for (const row of rows) found.set(suppressionKey(row.project_id, row.address), toRecord(row));
    });
    return found;
  }

  return {
    /**
     * PostgreSQL: the query `matchingIn` makes for these projects and addresses, as a statement for a caller
     * to run as part of its own (a guard: emails.repo.ts writes an accepted group only when it finds nothing, saving the
     * read before the write); undefined when more addresses than one statement reads.
     */
    matchingStatement(
      projectIds: readonly string[],
      addresses: readonly string[],
    ): CompiledQuery | undefined {
      const projects = [...new Set(projectIds)];
      const wanted = [...new Set(addresses.map(normalizeAddress))];
      if (wanted.length > LOOKUP_CHUNK) return undefined;
      return CompiledQuery.raw(FOUND, [projects, wanted]);
    },

    /**
     * Adds entries in `transaction`; an address already on the list keeps its first entry. The API's adds
     * and the outcomes of sends, reports and unsubscribes (emails/recipients.ts) write through it.
     */
    async add(entries: readonly NewSuppression[], transaction: Transaction): Promise<void> {
      await inChunks(entries, 200, (chunk) =>
        transaction.db
          .insertInto('suppressions')
          .values(
            chunk.map((entry) => ({
              id: newId('sup'),
              project_id: entry.projectId,
              address: normalizeAddress(entry.address),
              reason: entry.reason,
              email_id: entry.emailId,
              detail: entry.detail,
              created_at: entry.createdAt,
            })),
          )
          .onConflict((conflict) => conflict.columns(['project_id', 'address']).doNothing())
          .execute(),
      );
    },

    async list(
      projectId: string,
      page: PageRequest,
      reason?: SuppressionReason,
    ): Promise<Page<SuppressionRecord>> {
      let query = db.selectFrom('suppressions').selectAll().where('project_id', '=', projectId);
      if (reason) query = query.where('reason', '=', reason);
      return mapPage(await pageOfQuery(query, page), toRecord);
    },

    async find(projectId: string, address: string): Promise<SuppressionRecord | undefined> {
      const row = await db
        .selectFrom('suppressions')
        .selectAll()
        .where('project_id', '=', projectId)
        .where('address', '=', normalizeAddress(address))
        .executeTakeFirst();
      return row && toRecord(row);
    },

    async findById(projectId: string, id: string): Promise<SuppressionRecord | undefined> {
      const row = await db
        .selectFrom('suppressions')
        .selectAll()
        .where('project_id', '=', projectId)
        .where('id', '=', id)
        .executeTakeFirst();
      return row && toRecord(row);
    },

    /** The entries among these addresses, by lowercased address; in `transaction` when given. */
    async matching(
      projectId: string,
      addresses: readonly string[],
      transaction?: Transaction,
    ): Promise<Map<string, SuppressionRecord>> {
      const found = await matchingIn([projectId], addresses, transaction);
      return new Map([...found.values()].map((record) => [record.address, record]));
    },

    matchingIn,

    async delete(projectId: string, address: string, transaction?: Transaction): Promise<boolean> {
      const result = await (transaction?.db ?? db)
        .deleteFrom('suppressions')
        .where('project_id', '=', projectId)
        .where('address', '=', normalizeAddress(address))
        .executeTakeFirst();
      return Number(result.numDeletedRows) > 0;
    },
  };
}

export type SuppressionRepo = ReturnType<typeof createSuppressionRepo>;
