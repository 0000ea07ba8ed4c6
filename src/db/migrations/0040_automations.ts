import { type Kysely, sql } from 'kysely';
import type { Migration } from 'kysely/migration';

// Custom events and automations (issue 40).
//
// custom_events declares an event name (with an optional payload schema); custom_event_sends records each one
// sent for a contact (what triggers and resumes automations). An automation is one row: its graph of steps and
// connections as JSON (read whole, never queried inside), and the trigger's event name beside it so an event
// finds the automations it starts by an index.
//
// A run is a queue row (automation_runs): due when `due_at` has come and its lease (`locked_until`) is free. A
// delay or a wait with a timeout is only a `due_at` in the future, read by the claim through an index: a run
// that waits costs nothing until then. Each step a run takes is a row of automation_run_steps, written in the
// same transaction as what the step does (the email it sends, the contact it changes) and as the run's move to
// its next step, guarded by the run's `step_count`: a step is done once, or not at all, whatever crashes.
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('custom_events')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('name', 'text', (col) => col.notNull())
      .addColumn('schema', 'text')
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema
      .createIndex('custom_events_name')
      .on('custom_events')
      .columns(['project_id', 'name'])
      .unique()
      .execute();
    await db.schema
      .createTable('custom_event_sends')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('event_name', 'text', (col) => col.notNull())
      // No foreign key: what was sent stays listed after its contact is deleted.
      .addColumn('contact_id', 'text', (col) => col.notNull())
      .addColumn('payload', 'text', (col) => col.notNull())
      .addColumn('runs_started', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('runs_resumed', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('created_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema
      .createIndex('custom_event_sends_project_id')
      .on('custom_event_sends')
      .columns(['project_id', 'id'])
      .execute();

    await db.schema
      .createTable('automations')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('name', 'text', (col) => col.notNull())
      .addColumn('status', 'text', (col) => col.notNull())
      .addColumn('trigger_event', 'text', (col) => col.notNull())
      .addColumn('graph', 'text', (col) => col.notNull())
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema
      .createIndex('automations_project_id')
      .on('automations')
      .columns(['project_id', 'id'])
      .execute();
    await db.schema
      .createIndex('automations_trigger')
      .on('automations')
      .columns(['project_id', 'trigger_event'])
      .execute();

    await db.schema
      .createTable('automation_runs')
      .addColumn('id', 'text', (col) => col.primaryKey())
      .addColumn('project_id', 'text', (col) => col.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('automation_id', 'text', (col) =>
        col.notNull().references('automations.id').onDelete('cascade'),
      )
      .addColumn('contact_id', 'text', (col) => col.notNull())
      .addColumn('trigger_send_id', 'text')
      .addColumn('trigger_payload', 'text', (col) => col.notNull())
      // The latest event's payload, once a wait has received one (conditions and emails read `event.*` from it).
      .addColumn('event_payload', 'text')
      .addColumn('status', 'text', (col) => col.notNull())
      .addColumn('current_step', 'text', (col) => col.notNull())
      // How the current step was reached again after a wait: `event_received` (with the event's payload).
      .addColumn('resumed_by', 'text')
      .addColumn('waiting_event', 'text')
      .addColumn('step_count', 'integer', (col) => col.notNull().defaultTo(0))
      .addColumn('due_at', 'text')
      .addColumn('reason', 'text')
      .addColumn('locked_by', 'text')
      .addColumn('locked_until', 'text')
      .addColumn('started_at', 'text')
      .addColumn('completed_at', 'text')
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addColumn('updated_at', 'text', (col) => col.notNull())
      .execute();
    await db.schema
      .createIndex('automation_runs_automation')
      .on('automation_runs')
      .columns(['automation_id', 'id'])
      .execute();
    // The runs' queue: the live ones by when they are next due (a wait without a timeout has none).
    await db.schema
      .createIndex('automation_runs_due')
      .on('automation_runs')
      .columns(['due_at'])
      .where(sql.ref('status'), 'in', ['running', 'waiting'])
      .execute();
    // An event resumes the runs of its contact that wait for it.
    await db.schema
      .createIndex('automation_runs_contact')
      .on('automation_runs')
      .columns(['project_id', 'contact_id', 'status'])
      .execute();
    await db.schema
      .createTable('automation_run_steps')
      .addColumn('run_id', 'text', (col) =>
        col.notNull().references('automation_runs.id').onDelete('cascade'),
      )
      .addColumn('seq', 'integer', (col) => col.notNull())
      .addColumn('key', 'text', (col) => col.notNull())
      .addColumn('type', 'text', (col) => col.notNull())
      .addColumn('status', 'text', (col) => col.notNull())
      .addColumn('output', 'text')
      .addColumn('error', 'text')
      .addColumn('started_at', 'text')
      .addColumn('completed_at', 'text')
      .addColumn('created_at', 'text', (col) => col.notNull())
      .addPrimaryKeyConstraint('automation_run_steps_pk', ['run_id', 'seq'])
      .execute();
  },
};
