import { mapPage, type PageRequest } from '../../db/pagination.ts';
import type { Transaction } from '../../db/transaction.ts';
import { type Clock, nextUpdatedAt } from '../../lib/clock.ts';
import { conflict, DomainError, invalidParam, notFound } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import type { ContactRecord } from '../contacts/contacts.repo.ts';
import type { ContactService } from '../contacts/contacts.service.ts';
import { isEventKind } from '../event-kinds/event-kinds.ts';
import type { CustomEventRecord, CustomEventRepo, CustomEventSendRecord } from './custom-events.repo.ts';
import type {
  CreateCustomEventInput,
  CustomEventSendView,
  CustomEventView,
  EventSchemaMap,
  SendCustomEventInput,
  UpdateCustomEventInput,
} from './custom-events.schemas.ts';

// Custom events: what the project's own application says happened to a contact (`user.signed_up`), as
// against the delivery events Postwire emits about emails (/v1/events). A name may be declared with a payload
// schema; an event sent for a contact is recorded and, in the same transaction, starts the automations it
// triggers and resumes the contact's runs that wait for it (`EventTriggers`, filled by the automations module).

export const toCustomEventView = (record: CustomEventRecord): CustomEventView => ({
  object: 'custom_event',
  id: record.id,
  name: record.name,
  schema: record.schema,
  created_at: record.createdAt,
  updated_at: record.updatedAt,
});

/** What an event sent for a contact does to automations, in the send's transaction. */
export interface EventTriggers {
  eventSentIn(
    transaction: Transaction,
    sent: {
      projectId: string;
      sendId: string;
      eventName: string;
      contact: ContactRecord;
      payload: Record<string, unknown>;
    },
  ): Promise<{ started: number; resumed: number }>;
}

export interface CustomEventServiceDeps {
  repo: CustomEventRepo;
  contacts: Pick<ContactService, 'find' | 'lock' | 'prepareCreate' | 'create'>;
  clock: Clock;
  /** The automations' side (services.ts); nothing is triggered without it. */
  triggers?: EventTriggers | undefined;
}

/** The payload's fields against the declared schema: each field present of its declared type. */
export function checkPayload(schema: EventSchemaMap | null, payload: Record<string, unknown>): void {
  if (schema === null) return;
  for (const [field, type] of Object.entries(schema)) {
    const value = payload[field];
    if (value === undefined || value === null) continue;
    const ok =
      type === 'date'
        ? typeof value === 'string' && /^\d{4}-\d{2}-\d{2}/.test(value) && !Number.isNaN(Date.parse(value))
        : typeof value === type;
    if (!ok)
      throw invalidParam(
        `payload.${field}`,
        `payload.${field} must be a ${type}, as the event's schema declares.`,
      );
  }
}

interface SendPlan {
  projectId: string;
  eventName: string;
  payload: Record<string, unknown>;
  /** The contact by id or address, or one to create. */
  contact: { ref: string } | { create: Awaited<ReturnType<ContactService['prepareCreate']>> };
}

export function createCustomEventService({ repo, contacts, clock, triggers }: CustomEventServiceDeps) {
  async function load(
    projectId: string,
    idOrName: string,
    transaction?: Transaction,
  ): Promise<CustomEventRecord> {
    const record = await repo.find(
      projectId,
      isId('cev', idOrName) ? { id: idOrName } : { name: idOrName },
      transaction,
    );
    if (!record) throw notFound('custom event', idOrName);
    return record;
  }

  return {
    prepareCreate(projectId: string, input: CreateCustomEventInput): CustomEventRecord {
      if (isEventKind(input.name)) {
        throw invalidParam(
          'name',
          `'${input.name}' is one of Postwire's delivery event kinds; choose another name.`,
        );
      }
      const now = clock.now().toISOString();
      return {
        id: newId('cev'),
        projectId,
        name: input.name,
        schema: input.schema ?? null,
        createdAt: now,
        updatedAt: now,
      };
    },

    async create(transaction: Transaction, record: CustomEventRecord): Promise<CustomEventView> {
      if (!(await repo.insert(record, transaction))) {
        throw conflict(
          'custom_event_exists',
          `The project already declares an event '${record.name}'.`,
          'name',
        );
      }
      return toCustomEventView(record);
    },

    async get(projectId: string, idOrName: string): Promise<CustomEventView> {
      return toCustomEventView(await load(projectId, idOrName));
    },

    async list(projectId: string, page: PageRequest) {
      return mapPage(await repo.list(projectId, page), toCustomEventView);
    },

    async update(
      transaction: Transaction,
      projectId: string,
      idOrName: string,
      input: UpdateCustomEventInput,
    ) {
      const current = await load(projectId, idOrName, transaction);
      const next = { ...current, schema: input.schema, updatedAt: nextUpdatedAt(clock, current.updatedAt) };
      if (!(await repo.updateSchema(next, transaction))) throw notFound('custom event', idOrName);
      return toCustomEventView(next);
    },

    async delete(transaction: Transaction, projectId: string, idOrName: string) {
      const current = await load(projectId, idOrName, transaction);
      if (!(await repo.delete(projectId, current.id, transaction))) throw notFound('custom event', idOrName);
      return { object: 'custom_event' as const, id: current.id, deleted: true as const };
    },

    /** Checks a send before its transaction: one contact named, the payload against a declared schema. */
    async prepareSend(projectId: string, input: SendCustomEventInput): Promise<SendPlan> {
      const given = [input.contact_id, input.email].filter((value) => value !== undefined);
      if (given.length !== 1) {
        throw new DomainError(
          'validation',
          'parameter_invalid',
          'Send exactly one of contact_id, email.',
          'contact_id',
        );
      }
      if (input.create_contact === true && input.email === undefined) {
        throw invalidParam(
          'create_contact',
          'create_contact needs email (a contact_id names a contact that exists).',
        );
      }
      const payload = input.payload ?? {};
      const declared = await repo.find(projectId, { name: input.event });
      checkPayload(declared?.schema ?? null, payload);
      const ref = (input.contact_id ?? input.email)!;
      let contact: SendPlan['contact'] = { ref };
      try {
        await contacts.find(projectId, ref);
      } catch (error) {
        if (!(error instanceof DomainError && error.kind === 'not_found' && input.create_contact === true))
          throw error;
        contact = { create: await contacts.prepareCreate(projectId, { email: ref }) };
      }
      return { projectId, eventName: input.event, payload, contact };
    },

    /** Records the event and, in its transaction, starts and resumes the automations it concerns. */
    async send(transaction: Transaction, plan: SendPlan): Promise<CustomEventSendView> {
      const { projectId } = plan;
      let contact: ContactRecord;
      let created = false;
      if ('create' in plan.contact) {
        try {
          await contacts.create(transaction, plan.contact.create);
          created = true;
        } catch (error) {
          // Created meanwhile by someone else: the event is theirs too.
          if (!(error instanceof DomainError && error.kind === 'conflict')) throw error;
        }
        contact = await contacts.lock(transaction, projectId, plan.contact.create.record.email);
      } else {
        // Locked: the contact's delete cannot meet the runs this starts half-way.
        contact = await contacts.lock(transaction, projectId, plan.contact.ref);
      }
      const record: CustomEventSendRecord = {
        id: newId('cevs'),
        projectId,
        eventName: plan.eventName,
        contactId: contact.id,
        payload: plan.payload,
        runsStarted: 0,
        runsResumed: 0,
        createdAt: clock.now().toISOString(),
      };
      const done = await triggers?.eventSentIn(transaction, {
        projectId,
        sendId: record.id,
        eventName: plan.eventName,
        contact,
        payload: plan.payload,
      });
      record.runsStarted = done?.started ?? 0;
      record.runsResumed = done?.resumed ?? 0;
      await repo.insertSend(record, transaction);
      return {
        object: 'custom_event_send',
        id: record.id,
        event: record.eventName,
        contact_id: contact.id,
        contact_created: created,
        payload: record.payload,
        runs_started: record.runsStarted,
        runs_resumed: record.runsResumed,
        created_at: record.createdAt,
      };
    },
  };
}

export type CustomEventService = ReturnType<typeof createCustomEventService>;
