import type { Kysely } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { createValidatedCache, type Stamps } from '../../db/validated-cache.ts';
import { mapPage, type Page, type PageRequest, pageOfQuery } from '../../db/pagination.ts';
import type { Database, DomainStatus, Row } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import { locksRows } from '../../db/engine/sql.ts';
import type { ComplianceCheck } from './compliance.ts';
import { RETURN_PATH_LABEL, type RecordCheck } from './records.ts';
import { deleteProjectRow, updateProjectRow } from '../../db/project-rows.ts';

export interface DomainRecord {
  id: string;
  projectId: string;
  name: string;
  status: DomainStatus;
  dkimSelector: string;
  dkimPublicKey: string;
  dkimPrivateKeySealed: string;
  nextDkimSelector: string | null;
  nextDkimPublicKey: string | null;
  nextDkimPrivateKeySealed: string | null;
  returnPathVerified: boolean;
  /** What each record's last lookup found, by `<TYPE> <name>`; null before the first check. */
  checks: Record<string, RecordCheck> | null;
  /** The compliance checks of the last check (compliance.ts); null before it. */
  compliance: ComplianceCheck[] | null;
  lastCheckedAt: string | null;
  verifiedAt: string | null;
  nextCheckAt: string;
  createdAt: string;
  updatedAt: string;
  /** The token of its challenge record, which it needs while another project holds the name. */
  challengeToken: string;
  /** Its owner asked to receive mail for it. */
  receiving: boolean;
  /** Its receiving MX matched at the last check. */
  receivingVerified: boolean;
  /** Its project reads the DMARC aggregate reports mailed to `dmarc@<name>`. */
  dmarcReports: boolean;
}

export type NewDomain = Omit<
  DomainRecord,
  | 'checks'
  | 'compliance'
  | 'lastCheckedAt'
  | 'verifiedAt'
  | 'returnPathVerified'
  | 'status'
  | 'receivingVerified'
  | 'dmarcReports'
>;

/** A check's result as written: the new status and what was found. */
export interface CheckWrite {
  status: DomainStatus;
  returnPathVerified: boolean;
  receivingVerified: boolean;
  checks: Record<string, RecordCheck>;
  compliance: ComplianceCheck[] | null;
  checkedAt: string;
  verifiedAt: string | null;
  nextCheckAt: string;
  /** The rotation's key verified: it becomes the signing key. */
  switchTo?: { selector: string; publicKey: string; privateKeySealed: string } | undefined;
}

export const toDomainRecord = (row: Row<'domains'>): DomainRecord => ({
  id: row.id,
  projectId: row.project_id,
  name: row.name,
  status: row.status,
  dkimSelector: row.dkim_selector,
  dkimPublicKey: row.dkim_public_key,
  dkimPrivateKeySealed: row.dkim_private_key_sealed,
  nextDkimSelector: row.next_dkim_selector,
  nextDkimPublicKey: row.next_dkim_public_key,
  nextDkimPrivateKeySealed: row.next_dkim_private_key_sealed,
  returnPathVerified: Boolean(row.return_path_verified),
  checks: row.checks === null ? null : (JSON.parse(row.checks) as Record<string, RecordCheck>),
  compliance: row.compliance === null ? null : (JSON.parse(row.compliance) as ComplianceCheck[]),
  lastCheckedAt: row.last_checked_at,
  verifiedAt: row.verified_at,
  nextCheckAt: row.next_check_at,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
  challengeToken: row.challenge_token,
  receiving: Boolean(row.receiving),
  receivingVerified: Boolean(row.receiving_verified),
  dmarcReports: Boolean(row.dmarc_reports),
});

/** What decides who may send as a domain (`covering`). */
export type DomainCoverage = Pick<
  DomainRecord,
  'id' | 'projectId' | 'name' | 'status' | 'returnPathVerified'
>;

const COVERAGE_COLUMNS = ['id', 'project_id', 'name', 'status', 'return_path_verified'] as const;

const toCoverage = (row: Pick<Row<'domains'>, (typeof COVERAGE_COLUMNS)[number]>): DomainCoverage => ({
  id: row.id,
  projectId: row.project_id,
  name: row.name,
  status: row.status,
  returnPathVerified: Boolean(row.return_path_verified),
});

/** From domains (with their parents) whose coverage one process keeps in memory; past this, the oldest goes. */
const CACHED_COVERAGE = 1000;

/**
 * The domains table (sending domains and their re-check queue). `stamps`: keep the coverage lookups in
 * memory while the domains stamp holds (validated-cache.ts).
 */
export function createDomainRepo(db: Kysely<Database>, engine: Engine, stamps?: Stamps) {
  const coverage =
    stamps &&
    createValidatedCache<DomainCoverage[]>(stamps, { scope: 'domains', maxEntries: CACHED_COVERAGE });
  /** The project's domain whose `column` (its id or its name) is `value`. */
  const findOne = async (
    projectId: string,
    column: 'id' | 'name',
    value: string,
    transaction?: Transaction,
  ): Promise<DomainRecord | undefined> => {
    const row = await (transaction?.db ?? db)
      .selectFrom('domains')
      .selectAll()
      .where('project_id', '=', projectId)
      .where(column, '=', value)
      .executeTakeFirst();
    return row && toDomainRecord(row);
  };
  return {
    /**
     * Adds a domain (pending); false when the project has that name already (another request added it since
     * the caller looked). No error is raised for that, so a surrounding PostgreSQL transaction stays usable
     * for the 409. Other projects' domains of the same name do not stand in the way.
     */
    async insert(domain: NewDomain, transaction?: Transaction): Promise<boolean> {
      const result = await (transaction?.db ?? db)
        .insertInto('domains')
        .values({
          id: domain.id,
          project_id: domain.projectId,
          name: domain.name,
          status: 'pending',
          dkim_selector: domain.dkimSelector,
          dkim_public_key: domain.dkimPublicKey,
          dkim_private_key_sealed: domain.dkimPrivateKeySealed,
          next_dkim_selector: null,
          next_dkim_public_key: null,
          next_dkim_private_key_sealed: null,
          return_path_verified: false,
          checks: null,
          compliance: null,
          last_checked_at: null,
          verified_at: null,
          next_check_at: domain.nextCheckAt,
          locked_by: null,
          locked_until: null,
          created_at: domain.createdAt,
          updated_at: domain.updatedAt,
          challenge_token: domain.challengeToken,
          receiving: domain.receiving,
          receiving_verified: false,
        })
        .onConflict((conflict) => conflict.columns(['project_id', 'name']).doNothing())
        .returning('id')
        .executeTakeFirst();
      return result !== undefined;
    },

    async list(projectId: string, page: PageRequest): Promise<Page<DomainRecord>> {
      const query = db.selectFrom('domains').selectAll().where('project_id', '=', projectId);
      return mapPage(await pageOfQuery(query, page), toDomainRecord);
    },

    async find(projectId: string, id: string, transaction?: Transaction): Promise<DomainRecord | undefined> {
      return findOne(projectId, 'id', id, transaction);
    },

    /** The project's domain of this name. */
    async findByName(
      projectId: string,
      name: string,
      transaction?: Transaction,
    ): Promise<DomainRecord | undefined> {
      return findOne(projectId, 'name', name, transaction);
    },

    /**
     * In a check's transaction, before it reads anything: on PostgreSQL, locks every project's domain of this
     * name (in id order, so two checks never wait for each other crosswise). Two checks of one name then run
     * one after the other, and the second sees whether the first made its domain the holder. SQLite runs one
     * write transaction at a time anyway; the unique index on verified names backs both.
     */
    async lockName(name: string, transaction: Transaction): Promise<void> {
      if (!locksRows(engine)) return;
      await transaction.db
        .selectFrom('domains')
        .select('id')
        .where('name', '=', name)
        .orderBy('id')
        .forUpdate()
        .execute();
    },

    /** The verified domains among these names (a name and its parents), whichever project holds each. */
    async verifiedAmong(names: readonly string[], transaction?: Transaction): Promise<DomainCoverage[]> {
      if (names.length === 0) return [];
      const rows = await (transaction?.db ?? db)
        .selectFrom('domains')
        .select(COVERAGE_COLUMNS)
        .where('name', 'in', [...names])
        .where('status', '=', 'verified')
        .execute();
      return rows.map(toCoverage);
    },

    /**
     * A verified domain loses its name to another project that proved control (its challenge): `failed`,
     * written before the taker's `verified` (one verified domain per name). False when it was not verified.
     */
    async demote(id: string, now: string, transaction: Transaction): Promise<boolean> {
      const result = await transaction.db
        .updateTable('domains')
        .set({ status: 'failed', updated_at: now })
        .where('id', '=', id)
        .where('status', '=', 'verified')
        .executeTakeFirst();
      return Number(result.numUpdatedRows) > 0;
    },

    /** Reads a domain for a check's write; on PostgreSQL the row stays locked until the transaction ends. */
    async findForUpdate(id: string, transaction: Transaction): Promise<DomainRecord | undefined> {
      let query = transaction.db.selectFrom('domains').selectAll().where('id', '=', id);
      if (locksRows(engine)) query = query.forUpdate();
      const row = await query.executeTakeFirst();
      return row && toDomainRecord(row);
    },

    /**
     * Domains of any project with one of these names (a From domain and its parents), with what decides who
     * may send as them: every accepted send asks, so the answers are kept in memory while the domains stamp
     * holds (only these columns move it; migration 0018).
     */
    async covering(names: readonly string[]): Promise<readonly DomainCoverage[]> {
      if (names.length === 0) return [];
      const load = async () => {
        const rows = await db
          .selectFrom('domains')
          .select(COVERAGE_COLUMNS)
          .where('name', 'in', [...names])
          .execute();
        return rows.map(toCoverage);
      };
      return coverage ? coverage.get(names.join(' '), load) : load();
    },

    /** True when `name` is `bounces.<a domain some project has added>`: a return-path domain of ours. */
    async isReturnPathDomain(name: string): Promise<boolean> {
      const prefix = `${RETURN_PATH_LABEL}.`;
      const lower = name.toLowerCase().replace(/\.$/, '');
      if (!lower.startsWith(prefix)) return false;
      const row = await db
        .selectFrom('domains')
        .select('id')
        .where('name', '=', lower.slice(prefix.length))
        .executeTakeFirst();
      return row !== undefined;
    },

    async delete(projectId: string, id: string, transaction?: Transaction): Promise<boolean> {
      return deleteProjectRow(transaction?.db ?? db, 'domains', projectId, id);
    },

    /** Writes a check's result, and hands back the lease the background check may hold on it. */
    async saveCheck(id: string, write: CheckWrite, transaction: Transaction): Promise<void> {
      await transaction.db
        .updateTable('domains')
        .set({
          status: write.status,
          return_path_verified: write.returnPathVerified,
          receiving_verified: write.receivingVerified,
          checks: JSON.stringify(write.checks),
          compliance: write.compliance === null ? null : JSON.stringify(write.compliance),
          last_checked_at: write.checkedAt,
          verified_at: write.verifiedAt,
          next_check_at: write.nextCheckAt,
          updated_at: write.checkedAt,
          locked_by: null,
          locked_until: null,
          ...(write.switchTo
            ? {
                dkim_selector: write.switchTo.selector,
                dkim_public_key: write.switchTo.publicKey,
                dkim_private_key_sealed: write.switchTo.privateKeySealed,
                next_dkim_selector: null,
                next_dkim_public_key: null,
                next_dkim_private_key_sealed: null,
              }
            : {}),
        })
        .where('id', '=', id)
        .execute();
    },

    /**
     * Turns receiving on or off. Off forgets the MX's verdict; on leaves it to the next check, brought forward
     * to now so the background check looks at once.
     */
    async setReceiving(
      projectId: string,
      id: string,
      receiving: boolean,
      now: string,
      transaction?: Transaction,
    ): Promise<boolean> {
      return updateProjectRow(transaction?.db ?? db, 'domains', projectId, id, {
        receiving,
        updated_at: now,
        ...(receiving ? { next_check_at: now } : { receiving_verified: false }),
      });
    },

    /**
     * Turns reading the DMARC reports mailed to `dmarc@<name>` on or off; the next check (brought forward to
     * now) says in the compliance report whether the policy's `rua` names the address.
     */
    async setDmarcReports(
      projectId: string,
      id: string,
      on: boolean,
      now: string,
      transaction?: Transaction,
    ): Promise<boolean> {
      return updateProjectRow(transaction?.db ?? db, 'domains', projectId, id, {
        dmarc_reports: on,
        updated_at: now,
        next_check_at: now,
      });
    },

    /** The verified domain named `name` whose project reads the DMARC reports mailed to its own address. */
    async dmarcReportsAt(name: string): Promise<DomainCoverage | undefined> {
      const row = await db
        .selectFrom('domains')
        .select(COVERAGE_COLUMNS)
        .where('name', '=', name)
        .where('status', '=', 'verified')
        .where('dmarc_reports', '=', true)
        .executeTakeFirst();
      return row && toCoverage(row);
    },

    /** Stores a rotation's new key (pending until its record verifies), replacing a previous pending one. */
    async setNextKey(
      projectId: string,
      id: string,
      key: { selector: string; publicKey: string; privateKeySealed: string },
      now: string,
      transaction?: Transaction,
    ): Promise<boolean> {
      return updateProjectRow(transaction?.db ?? db, 'domains', projectId, id, {
        next_dkim_selector: key.selector,
        next_dkim_public_key: key.publicKey,
        next_dkim_private_key_sealed: key.privateKeySealed,
        updated_at: now,
      });
    },
  };
}

export type DomainRepo = ReturnType<typeof createDomainRepo>;
