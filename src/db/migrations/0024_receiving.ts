import { type Kysely, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// Receiving email (issue 26). A sending domain may also receive: `receiving` is asked for by its owner, and
// `receiving_verified` says its MX points at our listener (its own flag beside the domain's status, so that
// turning receiving on never stops a verified domain from sending while its MX is being published).
//
// inbound_routes: a project's routes, each an address pattern on one of its domains, a priority and an action.
// received_emails: one row per accepted envelope recipient of a received message (its own project, route and
// mailbox hash), with what was parsed out of the message; the bytes stay in inbound_raw, once per message.
// inbound_messages keeps what the listener decided before its 250: the HELO name (for SPF), each recipient's
// route (`routing`), and the spam verdict when spamd scored it.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .alterTable('domains')
      .addColumn('receiving', 'boolean', (col) => col.notNull().defaultTo(sql`false`))
      .execute();
    await db.schema
      .alterTable('domains')
      .addColumn('receiving_verified', 'boolean', (col) => col.notNull().defaultTo(sql`false`))
      .execute();
    for (const column of ['helo', 'routing', 'spam']) {
      await db.schema.alterTable('inbound_messages').addColumn(column, 'text').execute();
    }

    await db.schema
      .createTable('inbound_routes')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('domain', 'text', (col) => col.notNull())
      .addColumn('local_part', 'text', (col) => col.notNull())
      .addColumn('priority', 'integer', (col) => col.notNull())
      .addColumn('action', 'text', (col) => col.notNull())
      .addColumn('reject_message', 'text')
      .addColumn('spam_reject_score', 'real')
      .addColumn('enabled', 'boolean', (col) => col.notNull().defaultTo(sql`true`))
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema
      .createIndex('inbound_routes_domain')
      .on('inbound_routes')
      .columns(['domain', 'priority', 'id'])
      .execute();
    await db.schema
      .createIndex('inbound_routes_project')
      .on('inbound_routes')
      .columns(['project_id', 'id'])
      .execute();

    await db.schema
      .createTable('received_emails')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('inbound_id', 'text', (col) =>
        col.notNull().references('inbound_messages.id').onDelete('cascade'),
      )
      .addColumn('route_id', 'text')
      .addColumn('recipient', 'text', (col) => col.notNull())
      .addColumn('mailbox_hash', 'text')
      .addColumn('received_at', 'text', (col) => col.notNull())
      .addColumn('mail_from', 'text', (col) => col.notNull())
      .addColumn('from_address', 'text')
      .addColumn('subject', 'text')
      .addColumn('message_id', 'text')
      .addColumn('in_reply_to_email_id', 'text')
      .addColumn('in_reply_to_recipient', 'text')
      .addColumn('status', 'text', (col) => col.notNull())
      .addColumn('size', 'integer', (col) => col.notNull())
      .addColumn('attachment_count', 'integer', (col) => col.notNull())
      .addColumn('content', 'text', (col) => col.notNull())
      .addColumn('authentication', 'text')
      .addColumn('spam', 'text')
      .addColumn('created_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema
      .createIndex('received_emails_project')
      .on('received_emails')
      .columns(['project_id', 'id'])
      .execute();
    await db.schema
      .createIndex('received_emails_inbound')
      .on('received_emails')
      .columns(['inbound_id', 'recipient'])
      .unique()
      .execute();
  },
};
