import { type Kysely, PostgresAdapter, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// Migrations live in code (not files found at run time) so they ship with the process and run the same
// on both engines. Names sort in the order they apply; never edit one that has shipped, add another.
const migrations: Record<string, Migration> = {
  '0001_projects_keys_webhooks_templates': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('projects')
        .addColumn('id', 'text', (col) => col.primaryKey())
        .addColumn('name', 'text', (col) => col.notNull())
        .addColumn('is_default', 'boolean', (col) => col.notNull().defaultTo(false))
        .addColumn('created_at', 'text', (col) => col.notNull())
        .execute();

      await db.schema
        .createTable('api_keys')
        .addColumn('id', 'text', (col) => col.primaryKey())
        .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
        .addColumn('name', 'text')
        .addColumn('key_hash', 'text', (col) => col.notNull().unique())
        .addColumn('key_prefix', 'text', (col) => col.notNull())
        .addColumn('created_at', 'text', (col) => col.notNull())
        .addColumn('revoked_at', 'text')
        .execute();

      await db.schema
        .createTable('webhooks')
        .addColumn('id', 'text', (col) => col.primaryKey())
        .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
        .addColumn('url', 'text', (col) => col.notNull())
        .addColumn('enabled', 'boolean', (col) => col.notNull())
        .addColumn('events', 'text', (col) => col.notNull())
        .addColumn('secret_sealed', 'text')
        .addColumn('created_at', 'text', (col) => col.notNull())
        .addColumn('updated_at', 'text', (col) => col.notNull())
        .execute();
      await db.schema
        .createIndex('webhooks_project_id')
        .on('webhooks')
        .columns(['project_id', 'id'])
        .execute();

      await db.schema
        .createTable('templates')
        .addColumn('id', 'text', (col) => col.primaryKey())
        .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
        .addColumn('name', 'text', (col) => col.notNull())
        .addColumn('alias', 'text')
        .addColumn('subject', 'text')
        .addColumn('html', 'text')
        .addColumn('text', 'text')
        .addColumn('variables', 'text', (col) => col.notNull())
        .addColumn('created_at', 'text', (col) => col.notNull())
        .addColumn('updated_at', 'text', (col) => col.notNull())
        .addColumn('published_at', 'text')
        .addColumn('published_version', 'integer')
        .execute();
      await db.schema
        .createIndex('templates_project_id')
        .on('templates')
        .columns(['project_id', 'id'])
        .execute();
      await db.schema
        .createIndex('templates_project_alias')
        .on('templates')
        .columns(['project_id', 'alias'])
        .unique()
        .execute();

      await db.schema
        .createTable('template_versions')
        .addColumn('template_id', 'text', (col) =>
          col.notNull().references('templates.id').onDelete('cascade'),
        )
        .addColumn('version', 'integer', (col) => col.notNull())
        .addColumn('project_id', 'text', (col) => col.notNull())
        .addColumn('name', 'text', (col) => col.notNull())
        .addColumn('subject', 'text')
        .addColumn('html', 'text')
        .addColumn('text', 'text')
        .addColumn('variables', 'text', (col) => col.notNull())
        .addColumn('published_at', 'text', (col) => col.notNull())
        .addPrimaryKeyConstraint('template_versions_pk', ['template_id', 'version'])
        .execute();

      await db.schema
        .createTable('idempotency_keys')
        .addColumn('project_id', 'text', (col) => col.notNull())
        .addColumn('key', 'text', (col) => col.notNull())
        .addColumn('request_hash', 'text', (col) => col.notNull())
        .addColumn('status_code', 'integer')
        .addColumn('response_body', 'text')
        .addColumn('created_at', 'text', (col) => col.notNull())
        .addPrimaryKeyConstraint('idempotency_keys_pk', ['project_id', 'key'])
        .execute();
      await db.schema
        .createIndex('idempotency_keys_created_at')
        .on('idempotency_keys')
        .column('created_at')
        .execute();
    },
  },
  // Events and their webhook deliveries (the outbox): an event and its delivery rows are written in one
  // transaction; workers claim due rows with a lease. Every attempt is its own row for the delivery log.
  '0002_events_deliveries': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('events')
        .addColumn('id', 'text', (col) => col.primaryKey())
        .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
        .addColumn('type', 'text', (col) => col.notNull())
        .addColumn('data', 'text', (col) => col.notNull())
        .addColumn('created_at', 'text', (col) => col.notNull())
        .execute();
      await db.schema.createIndex('events_project_id').on('events').columns(['project_id', 'id']).execute();
      await db.schema
        .createIndex('events_project_type')
        .on('events')
        .columns(['project_id', 'type', 'id'])
        .execute();

      // Deleting a webhook deletes its deliveries (and their attempts): nothing is left to send to it.
      await db.schema
        .createTable('deliveries')
        .addColumn('id', 'text', (col) => col.primaryKey())
        .addColumn('project_id', 'text', (col) => col.notNull())
        .addColumn('event_id', 'text', (col) => col.notNull().references('events.id').onDelete('cascade'))
        .addColumn('webhook_id', 'text', (col) => col.notNull().references('webhooks.id').onDelete('cascade'))
        .addColumn('status', 'text', (col) => col.notNull())
        .addColumn('attempts', 'integer', (col) => col.notNull().defaultTo(0))
        .addColumn('next_attempt_at', 'text', (col) => col.notNull())
        .addColumn('locked_until', 'text')
        .addColumn('locked_by', 'text')
        .addColumn('last_attempt_at', 'text')
        .addColumn('last_status_code', 'integer')
        .addColumn('last_error', 'text')
        .addColumn('created_at', 'text', (col) => col.notNull())
        .addColumn('updated_at', 'text', (col) => col.notNull())
        .addColumn('completed_at', 'text')
        .execute();
      // The claim query: pending rows in due order.
      await db.schema
        .createIndex('deliveries_due')
        .on('deliveries')
        .columns(['status', 'next_attempt_at'])
        .execute();
      await db.schema.createIndex('deliveries_event').on('deliveries').columns(['event_id', 'id']).execute();
      await db.schema
        .createIndex('deliveries_webhook')
        .on('deliveries')
        .columns(['webhook_id', 'id'])
        .execute();
      await db.schema
        .createIndex('deliveries_project')
        .on('deliveries')
        .columns(['project_id', 'id'])
        .execute();

      await db.schema
        .createTable('delivery_attempts')
        .addColumn('id', 'text', (col) => col.primaryKey())
        .addColumn('delivery_id', 'text', (col) =>
          col.notNull().references('deliveries.id').onDelete('cascade'),
        )
        .addColumn('project_id', 'text', (col) => col.notNull())
        .addColumn('webhook_id', 'text', (col) => col.notNull())
        .addColumn('event_id', 'text', (col) => col.notNull())
        .addColumn('attempted_at', 'text', (col) => col.notNull())
        .addColumn('status_code', 'integer')
        .addColumn('duration_ms', 'integer', (col) => col.notNull())
        .addColumn('error', 'text')
        .addColumn('response_excerpt', 'text')
        .execute();
      await db.schema
        .createIndex('delivery_attempts_delivery')
        .on('delivery_attempts')
        .columns(['delivery_id', 'id'])
        .execute();
      await db.schema
        .createIndex('delivery_attempts_webhook')
        .on('delivery_attempts')
        .columns(['webhook_id', 'id'])
        .execute();

      // SQLite adds one column per statement.
      for (const column of ['disabled_reason', 'last_success_at', 'failing_since']) {
        await db.schema.alterTable('webhooks').addColumn(column, 'text').execute();
      }
    },
  },
  // Sending: an email and one row per recipient (the sending job, claimed with a lease like a delivery),
  // the captured MIME of the capture transport, the email's events (an outbox in front of the event
  // service) and each project's fair-queue clock and daily count.
  '0003_emails': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('emails')
        .addColumn('id', 'text', (col) => col.primaryKey())
        .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
        .addColumn('from_address', 'text', (col) => col.notNull())
        .addColumn('to_addresses', 'text', (col) => col.notNull())
        .addColumn('cc_addresses', 'text', (col) => col.notNull())
        .addColumn('bcc_addresses', 'text', (col) => col.notNull())
        .addColumn('reply_to', 'text', (col) => col.notNull())
        .addColumn('subject', 'text', (col) => col.notNull())
        .addColumn('html', 'text')
        .addColumn('text', 'text')
        .addColumn('headers', 'text', (col) => col.notNull())
        .addColumn('tags', 'text', (col) => col.notNull())
        .addColumn('template_id', 'text')
        .addColumn('template_version', 'integer')
        .addColumn('message_id', 'text', (col) => col.notNull())
        .addColumn('status', 'text', (col) => col.notNull())
        .addColumn('recipient_count', 'integer', (col) => col.notNull())
        .addColumn('scheduled_at', 'text')
        .addColumn('created_at', 'text', (col) => col.notNull())
        .addColumn('updated_at', 'text', (col) => col.notNull())
        .execute();
      await db.schema.createIndex('emails_project_id').on('emails').columns(['project_id', 'id']).execute();

      await db.schema
        .createTable('email_recipients')
        .addColumn('id', 'text', (col) => col.primaryKey())
        .addColumn('email_id', 'text', (col) => col.notNull().references('emails.id').onDelete('cascade'))
        .addColumn('project_id', 'text', (col) => col.notNull())
        .addColumn('position', 'integer', (col) => col.notNull())
        .addColumn('type', 'text', (col) => col.notNull())
        .addColumn('address', 'text', (col) => col.notNull())
        .addColumn('host', 'text', (col) => col.notNull())
        .addColumn('status', 'text', (col) => col.notNull())
        .addColumn('attempts', 'integer', (col) => col.notNull().defaultTo(0))
        .addColumn('ready_seq', 'bigint')
        .addColumn('wait_until', 'text')
        .addColumn('next_attempt_at', 'text')
        .addColumn('locked_until', 'text')
        .addColumn('locked_by', 'text')
        .addColumn('last_attempt_at', 'text')
        .addColumn('last_response', 'text')
        .addColumn('last_response_code', 'integer')
        .addColumn('created_at', 'text', (col) => col.notNull())
        .addColumn('updated_at', 'text', (col) => col.notNull())
        .addColumn('completed_at', 'text')
        .execute();
      await db.schema
        .createIndex('email_recipients_email')
        .on('email_recipients')
        .columns(['email_id', 'position'])
        .execute();
      // The two queue indexes hold only the rows they serve (due, or waiting), so they stay small however
      // many sent recipients the table keeps.
      await db.schema
        .createIndex('email_recipients_ready')
        .on('email_recipients')
        .column('ready_seq')
        .where(sql.ref('ready_seq'), 'is not', null)
        .execute();
      await db.schema
        .createIndex('email_recipients_waiting')
        .on('email_recipients')
        .column('wait_until')
        .where(sql.ref('wait_until'), 'is not', null)
        .execute();

      await db.schema
        .createTable('email_raw')
        .addColumn('email_id', 'text', (col) => col.primaryKey().references('emails.id').onDelete('cascade'))
        .addColumn('project_id', 'text', (col) => col.notNull())
        .addColumn('raw', 'text', (col) => col.notNull())
        .addColumn('created_at', 'text', (col) => col.notNull())
        .execute();

      await db.schema
        .createTable('email_events')
        .addColumn('id', 'text', (col) => col.primaryKey())
        .addColumn('email_id', 'text', (col) => col.notNull().references('emails.id').onDelete('cascade'))
        .addColumn('project_id', 'text', (col) => col.notNull())
        .addColumn('recipient', 'text', (col) => col.notNull())
        .addColumn('type', 'text', (col) => col.notNull())
        .addColumn('data', 'text', (col) => col.notNull())
        .addColumn('created_at', 'text', (col) => col.notNull())
        .addColumn('event_id', 'text')
        .execute();
      await db.schema
        .createIndex('email_events_email')
        .on('email_events')
        .columns(['email_id', 'id'])
        .execute();
      await db.schema
        .createIndex('email_events_unemitted')
        .on('email_events')
        .column('created_at')
        .where(sql.ref('event_id'), 'is', null)
        .execute();

      await db.schema
        .createTable('project_send_state')
        .addColumn('project_id', 'text', (col) =>
          col.primaryKey().references('projects.id').onDelete('cascade'),
        )
        .addColumn('fair_seq', 'bigint', (col) => col.notNull())
        .addColumn('quota_day', 'text', (col) => col.notNull())
        .addColumn('quota_used', 'integer', (col) => col.notNull())
        .execute();
    },
  },
  // Secret rotation: the secret a PATCH replaced keeps signing (next to the new one) until it expires, so
  // receivers can switch over. A partial index on failed deliveries serves recovery ("every failed delivery
  // of this webhook since …") and the `status=failed` filter of the delivery log without growing with the
  // succeeded rows that make up almost all of the table.
  '0004_webhook_operations': {
    async up(db: Kysely<unknown>) {
      for (const column of ['previous_secret_sealed', 'previous_secret_expires_at']) {
        await db.schema.alterTable('webhooks').addColumn(column, 'text').execute();
      }
      await db.schema
        .createIndex('deliveries_webhook_failed')
        .on('deliveries')
        .columns(['webhook_id', 'id'])
        .where(sql.ref('status'), '=', 'failed')
        .execute();
    },
  },
  // Sending without a hot row: one counter row per project made every accepted email of a project wait for
  // the previous one's commit on PostgreSQL (100 emails/s). Queue positions now come from the project's own
  // rows (an index finds its highest queued position), and the daily count is spread over a few shard rows.
  '0005_send_quota_shards': {
    async up(db: Kysely<unknown>) {
      await db.schema.dropTable('project_send_state').execute();
      await db.schema
        .createTable('send_quota')
        .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
        .addColumn('day', 'text', (col) => col.notNull())
        .addColumn('shard', 'integer', (col) => col.notNull())
        .addColumn('used', 'integer', (col) => col.notNull())
        .addPrimaryKeyConstraint('send_quota_pk', ['project_id', 'day', 'shard'])
        .execute();
      await db.schema
        .createIndex('email_recipients_project_ready')
        .on('email_recipients')
        .columns(['project_id', 'ready_seq'])
        .where(sql.ref('ready_seq'), 'is not', null)
        .execute();
    },
  },
  // The delivery worker tops up each webhook it knows has work with that webhook's next due rows: this index
  // finds them directly, where deliveries_due would walk past every other webhook's pending rows.
  '0006_deliveries_webhook_due': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createIndex('deliveries_webhook_due')
        .on('deliveries')
        .columns(['status', 'webhook_id', 'next_attempt_at'])
        .execute();
    },
  },
  '0007_one_default_project': {
    // Two processes starting at once on an empty database must not both make a default project.
    async up(db) {
      await db.schema
        .createIndex('projects_one_default')
        .on('projects')
        .column('is_default')
        .unique()
        .where(sql.ref('is_default'), '=', sql.lit(true))
        .execute();
    },
  },
};

/**
 * Brings the schema up to date, each pending migration in name order, all in one transaction with the
 * list of applied names. Safe from several processes at once: on PostgreSQL an advisory lock per schema
 * serializes them; on SQLite the transaction's write lock does.
 *
 * Kysely's own Migrator is not used: it introspects every table of every schema to find its bookkeeping
 * table, and fails when another schema's tables are dropped meanwhile (parallel test runs do that).
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- migrations work on any schema
export async function migrateToLatest(db: Kysely<any>): Promise<string[]> {
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
    const applied: string[] = [];
    for (const name of Object.keys(migrations).sort()) {
      if (done.has(name)) continue;
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
