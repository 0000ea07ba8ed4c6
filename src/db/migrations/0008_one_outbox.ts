import { type Kysely, sql } from 'kysely';
import type { Migration } from 'kysely/migration';
import { newId } from '../../lib/ids.ts';

/**
 * One outbox: the sending worker emits an email's events in the transaction that records the attempt, so
 * the `email_events` table in front of the event service goes. An email's timeline is read from `events`
 * through their new `email_id`. Rows that were written but never emitted (their worker died in between)
 * are emitted here, with their deliveries, as the old sweep would have done.
 */
export const migration: Migration = {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the tables of that time, gone since
  async up(db: Kysely<any>) {
    await db.schema.alterTable('events').addColumn('email_id', 'text').execute();
    await db.schema
      .createIndex('events_email')
      .on('events')
      .columns(['email_id', 'id'])
      .where(sql.ref('email_id'), 'is not', null)
      .execute();
    await sql`UPDATE events SET email_id = (SELECT email_id FROM email_events WHERE email_events.event_id = events.id)
      WHERE id IN (SELECT event_id FROM email_events WHERE event_id IS NOT NULL)`.execute(db);

    const unemitted: Array<{ project_id: string; email_id: string; type: string; data: string }> = await db
      .selectFrom('email_events')
      .select(['project_id', 'email_id', 'type', 'data'])
      .where('event_id', 'is', null)
      .orderBy('created_at')
      .orderBy('id')
      .execute();
    const now = new Date().toISOString();
    for (const row of unemitted) {
      const eventId = newId('evt');
      await db
        .insertInto('events')
        .values({
          id: eventId,
          project_id: row.project_id,
          type: row.type,
          data: row.data,
          created_at: now,
          email_id: row.email_id,
        })
        .execute();
      const webhooks: Array<{ id: string; events: string }> = await db
        .selectFrom('webhooks')
        .select(['id', 'events'])
        .where('project_id', '=', row.project_id)
        .where('enabled', '=', true)
        .execute();
      for (const webhook of webhooks) {
        if (!(JSON.parse(webhook.events) as string[]).includes(row.type)) continue;
        await db
          .insertInto('deliveries')
          .values({
            id: newId('dlv'),
            project_id: row.project_id,
            event_id: eventId,
            webhook_id: webhook.id,
            status: 'pending',
            attempts: 0,
            next_attempt_at: now,
            created_at: now,
            updated_at: now,
          })
          .execute();
      }
    }
    await db.schema.dropTable('email_events').execute();
  },
};
