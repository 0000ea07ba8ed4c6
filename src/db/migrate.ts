import { type Kysely, PostgresAdapter, sql } from 'kysely';
import type { Migration } from 'kysely/migration';
import { migration as projectsKeysWebhooksTemplates } from './migrations/0001_projects_keys_webhooks_templates.ts';
import { migration as eventsDeliveries } from './migrations/0002_events_deliveries.ts';
import { migration as emails } from './migrations/0003_emails.ts';
import { migration as webhookOperations } from './migrations/0004_webhook_operations.ts';
import { migration as sendQuotaShards } from './migrations/0005_send_quota_shards.ts';
import { migration as deliveriesWebhookDue } from './migrations/0006_deliveries_webhook_due.ts';
import { migration as oneDefaultProject } from './migrations/0007_one_default_project.ts';
import { migration as oneOutbox } from './migrations/0008_one_outbox.ts';
import { migration as workerHeartbeats } from './migrations/0009_worker_heartbeats.ts';
import { migration as suppressions } from './migrations/0010_suppressions.ts';
import { migration as inboundMessages } from './migrations/0011_inbound_messages.ts';
import { migration as engagement } from './migrations/0012_engagement.ts';
import { migration as domains } from './migrations/0013_domains.ts';
import { migration as emailAttachments } from './migrations/0014_email_attachments.ts';
import { migration as cacheStamps } from './migrations/0015_cache_stamps.ts';
import { migration as emailsByStatus } from './migrations/0016_emails_by_status.ts';
import { migration as cacheStampNotify } from './migrations/0017_cache_stamp_notify.ts';
import { migration as domainStamps } from './migrations/0018_domain_stamps.ts';
import { migration as pendingDeliveries } from './migrations/0019_pending_deliveries.ts';
import { migration as fewerDeliveryIndexes } from './migrations/0020_fewer_delivery_indexes.ts';
import { migration as domainClaims } from './migrations/0021_domain_claims.ts';
import { migration as inboundRaw } from './migrations/0022_inbound_raw.ts';
import { migration as encryptionCanary } from './migrations/0023_encryption_canary.ts';
import { migration as receiving } from './migrations/0024_receiving.ts';
import { migration as submission } from './migrations/0025_submission.ts';
import { migration as apiKeyScopes } from './migrations/0026_api_key_scopes.ts';
import { migration as messagePieces } from './migrations/0027_message_pieces.ts';
import { migration as attachmentPieces } from './migrations/0028_attachment_pieces.ts';
import { migration as contacts } from './migrations/0029_contacts.ts';
import { migration as webhookFormat } from './migrations/0030_webhook_format.ts';
import { migration as segmentsTopics } from './migrations/0031_segments_topics.ts';
import { migration as domainCompliance } from './migrations/0032_domain_compliance.ts';
import { migration as dmarcRecords } from './migrations/0033_dmarc_records.ts';
import { migration as destinations } from './migrations/0034_destinations.ts';
import { migration as contactImports } from './migrations/0035_contact_imports.ts';
import { migration as reputationStates } from './migrations/0036_reputation_states.ts';
import { migration as broadcasts } from './migrations/0037_broadcasts.ts';
import { migration as segmentFilters } from './migrations/0038_segment_filters.ts';
import { migration as apiLogs } from './migrations/0039_api_logs.ts';
import { migration as automations } from './migrations/0040_automations.ts';
import { migration as warmupsOverrides } from './migrations/0041_warmups_overrides.ts';
import { migration as automationGraphs } from './migrations/0042_automation_graphs.ts';
import { migration as apiLogAnswers } from './migrations/0043_api_log_answers.ts';
import { migration as recipientsHostReady } from './migrations/0044_recipients_host_ready.ts';
import { migration as domainDmarcReports } from './migrations/0045_domain_dmarc_reports.ts';
import { migration as sourceWarmupCounts } from './migrations/0046_source_warmup_counts.ts';
import { migration as recipientsPacedHost } from './migrations/0047_recipients_paced_host.ts';
import { migration as stampListeners } from './migrations/0048_stamp_listeners.ts';
import { migration as recipientsAddressProject } from './migrations/0049_recipients_address_project.ts';

// Migrations live in code (one file each under migrations/, listed here, not found at run time) so they
// ship with the process and run the same on both engines. Names sort in the order they apply; never edit
// one that has shipped, add another.
const migrations: Record<string, Migration> = {
  '0001_projects_keys_webhooks_templates': projectsKeysWebhooksTemplates,
  '0002_events_deliveries': eventsDeliveries,
  '0003_emails': emails,
  '0004_webhook_operations': webhookOperations,
  '0005_send_quota_shards': sendQuotaShards,
  '0006_deliveries_webhook_due': deliveriesWebhookDue,
  '0007_one_default_project': oneDefaultProject,
  '0008_one_outbox': oneOutbox,
  '0009_worker_heartbeats': workerHeartbeats,
  '0010_suppressions': suppressions,
  '0011_inbound_messages': inboundMessages,
  '0012_engagement': engagement,
  '0013_domains': domains,
  '0014_email_attachments': emailAttachments,
  '0015_cache_stamps': cacheStamps,
  '0016_emails_by_status': emailsByStatus,
  '0017_cache_stamp_notify': cacheStampNotify,
  '0018_domain_stamps': domainStamps,
  '0019_pending_deliveries': pendingDeliveries,
  '0020_fewer_delivery_indexes': fewerDeliveryIndexes,
  '0021_domain_claims': domainClaims,
  '0022_inbound_raw': inboundRaw,
  '0023_encryption_canary': encryptionCanary,
  '0024_receiving': receiving,
  '0025_submission': submission,
  '0026_api_key_scopes': apiKeyScopes,
  '0027_message_pieces': messagePieces,
  '0028_attachment_pieces': attachmentPieces,
  '0029_contacts': contacts,
  '0030_webhook_format': webhookFormat,
  '0031_segments_topics': segmentsTopics,
  '0032_domain_compliance': domainCompliance,
  '0033_dmarc_records': dmarcRecords,
  '0034_destinations': destinations,
  '0035_contact_imports': contactImports,
  '0036_reputation_states': reputationStates,
  '0037_broadcasts': broadcasts,
  '0038_segment_filters': segmentFilters,
  '0039_api_logs': apiLogs,
  '0040_automations': automations,
  '0041_warmups_overrides': warmupsOverrides,
  '0042_automation_graphs': automationGraphs,
  '0043_api_log_answers': apiLogAnswers,
  '0044_recipients_host_ready': recipientsHostReady,
  '0045_domain_dmarc_reports': domainDmarcReports,
  '0046_source_warmup_counts': sourceWarmupCounts,
  '0047_recipients_paced_host': recipientsPacedHost,
  '0048_stamp_listeners': stampListeners,
  '0049_recipients_address_project': recipientsAddressProject,
};

/** The database was migrated by a newer Postwire: this code must not run on a schema it does not know. */
export class UnknownMigrationError extends Error {
  readonly names: string[];
  constructor(names: string[]) {
    super(
      `the database holds migration ${names.join(', ')}, which this version of Postwire does not know; ` +
        'it was migrated by a newer version. Run that version (or newer), or restore a backup taken before it.',
    );
    this.name = 'UnknownMigrationError';
    this.names = names;
  }
}

/**
 * Brings the schema up to date, each pending migration in name order, all in one transaction with the
 * list of applied names. Safe from several processes at once: on PostgreSQL an advisory lock per schema
 * serializes them; on SQLite the transaction's write lock does. Refuses (UnknownMigrationError) a database
 * holding a migration this code does not have, before it changes anything.
 *
 * Kysely's own Migrator is not used: it introspects every table of every schema to find its bookkeeping
 * table, and fails when another schema's tables are dropped meanwhile (parallel test runs do that).
 */
export async function migrateToLatest(
  db: Kysely<any>, // eslint-disable-line @typescript-eslint/no-explicit-any -- migrations work on any schema
  options: {
    /**
     * Only the migrations whose names sort before this one: the schema an earlier version left, for a test
     * of the migration that follows.
     */
    before?: string;
  } = {},
): Promise<string[]> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  return db.transaction().execute(async (trx) => {
    if (postgres) await sql`select pg_advisory_xact_lock(hashtext(current_schema()))`.execute(trx);
    await trx.schema
      .createTable('postwire_migrations')
      .ifNotExists()
      .addColumn('name', 'text', (col) => col.primaryKey())
      .addColumn('applied_at', 'text', (col) => col.notNull())
      .execute();
    const rows = await trx.selectFrom('postwire_migrations').select('name').execute();
    const done = new Set(rows.map((row: { name: string }) => row.name));
    const unknown = [...done].filter((name) => !(name in migrations)).sort();
    if (unknown.length > 0) throw new UnknownMigrationError(unknown);
    const applied: string[] = [];
    for (const name of Object.keys(migrations).sort()) {
      if (done.has(name) || (options.before !== undefined && name >= options.before)) continue;
      await migrations[name]!.up(trx);
      await trx
        .insertInto('postwire_migrations')
        .values({ name, applied_at: new Date().toISOString() })
        .execute();
      applied.push(name);
    }
    return applied;
  });
}

/** How the database's applied migrations compare with this code's list. */
export interface MigrationStatus {
  /** Migrations of this code the database has not applied yet. */
  pending: string[];
  /** Migrations the database has applied that this code does not know (a newer version migrated it). */
  unknown: string[];
}

/**
 * Reads the applied migrations and compares them with this code's, changing nothing: one small read of the
 * bookkeeping table (a row per migration), cheap enough for every readiness probe.
 */
export async function migrationStatus(
  db: Kysely<any>, // eslint-disable-line @typescript-eslint/no-explicit-any -- migrations work on any schema
): Promise<MigrationStatus> {
  const rows: Array<{ name: string }> = await db.selectFrom('postwire_migrations').select('name').execute();
  const applied = new Set(rows.map((row) => row.name));
  return {
    pending: Object.keys(migrations)
      .filter((name) => !applied.has(name))
      .sort(),
    unknown: [...applied].filter((name) => !(name in migrations)).sort(),
  };
}
