import type { Kysely } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { mapPage, type PageRequest } from '../../db/pagination.ts';
import { writesInWith } from '../../db/engine/sql.ts';
import type { Database } from '../../db/schema.ts';
import type { Clock } from '../../lib/clock.ts';
import { conflict, DomainError, invalidParam, notFound } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import { inTransaction, type Transaction } from '../../db/transaction.ts';
import { type Notifier, notifyOtherProcesses, QUEUE_CHANNELS } from '../../queue/notifier.ts';
import type { DeliveryRepo, NewDelivery } from '../deliveries/deliveries.repo.ts';
import type { DeliveryService } from '../deliveries/deliveries.service.ts';
import { type EventKind, isEventKind } from '../event-kinds/event-kinds.ts';
import { eventIncrements, type StatsRepo } from '../stats/stats.repo.ts';
import type { WebhookRepo } from '../webhooks/webhooks.repo.ts';
import { type MetricsRecorder, noMetrics } from '../metrics/instruments.ts';
import { type EventRecord, type EventRepo, insertEventsWhere } from './events.repo.ts';
import type { EventView, EventWithDeliveriesView, RedeliveryView } from './events.schemas.ts';

export interface EventServiceDeps {
  db: Kysely<Database>;
  engine: Engine;
  clock: Clock;
  notifier: Notifier;
  repo: EventRepo;
  deliveryRepo: Pick<DeliveryRepo, 'insertPending' | 'listForEvent'>;
  /** An event's deliveries, as its view shows them. */
  deliveries: Pick<DeliveryService, 'listForEvent'>;
  /** Whom each event goes to (the process's webhook repository, which keeps them in memory). */
  webhooks: Pick<WebhookRepo, 'enabledWebhooks' | 'readStamp'>;
  /** The daily counts (GET /v1/stats), written with the events they count. */
  stats: Pick<StatsRepo, 'countEvents' | 'addCountsWhere'>;
  /** Counts the events once committed (/metrics); nothing is counted when absent. */
  metrics?: Pick<MetricsRecorder, 'eventsEmitted'> | undefined;
}

export interface EmitOptions {
  /**
   * Deliver to this webhook of the project only, whether or not it subscribes to the kind (a test send).
   * A disabled webhook still gets nothing: the caller checks and says so if it matters.
   */
  webhookId?: string;
  /** The email the event is about: it joins that email's timeline. */
  emailId?: string;
}

/** One event to emit. */
export interface NewEvent extends EmitOptions {
  projectId: string;
  kind: EventKind;
  data: Record<string, unknown>;
}

/** Events written as parts of a caller's statement (emitWith). */
export interface EmitWith {
  /** The parts of the statement's WITH, each named, their placeholders from `param`, written when `guard`. */
  writes(param: (value: unknown) => string, guard: string): string[];
  /** Call once the statement's transaction has committed with the events written. */
  committed(): void;
}

export interface EmittedEvent extends EventView {
  /** The deliveries created, one per receiving webhook. */
  delivery_ids: string[];
}

const toView = (record: EventRecord): EventView => ({
  object: 'event',
  id: record.id,
  // Only kinds of the catalogue are ever stored (emit checks).
  type: record.type as EventKind,
  created_at: record.createdAt,
  data: JSON.parse(record.data) as Record<string, unknown>,
});

/** A redelivery decided before its transaction: the deliveries to write and the answer. */
interface RedeliveryPlan {
  rows: NewDelivery[];
  view: RedeliveryView;
}

export function createEventService({
  db,
  engine,
  clock,
  notifier,
  repo,
  deliveryRepo,
  deliveries,
  webhooks: webhookRepo,
  stats,
  metrics = noMetrics,
}: EventServiceDeps) {
  /** Writes pending deliveries in the caller's transaction; workers here and elsewhere wake at its commit. */
  async function enqueue(transaction: Transaction, rows: NewDelivery[]): Promise<void> {
    if (rows.length === 0) return;
    await deliveryRepo.insertPending(rows, transaction);
    await notifyOtherProcesses(transaction.db, engine, QUEUE_CHANNELS.deliveries);
    transaction.afterCommit(() => notifier.notify());
  }

  /**
   * The events' rows, the deliveries they make (one per enabled webhook of their project subscribed to their
   * kind) and what emitting them answers, decided before any write: the webhooks are read in `transaction`,
   * which must not have written webhooks (none does), so they are the committed ones, known without a read
   * while the stamps are vouched for (validated-cache.ts).
   */
  async function plan(transaction: Transaction, events: readonly NewEvent[]) {
    const now = clock.now().toISOString();
    const records = events.map((event): EventRecord => {
      if (!isEventKind(event.kind)) throw new Error(`Unknown event kind '${String(event.kind)}'.`);
      const { data } = event;
      if (typeof data !== 'object' || data === null || Array.isArray(data)) {
        throw new Error('Event data must be an object.');
      }
      return {
        id: newId('evt'),
        projectId: event.projectId,
        type: event.kind,
        data: JSON.stringify(data),
        createdAt: now,
        emailId: event.emailId ?? null,
      };
    });
    // Each project's webhooks are read once for all of its events.
    const webhooksOf = new Map<string, ReturnType<typeof webhookRepo.enabledWebhooks>>();
    const deliveries: NewDelivery[] = [];
    const emitted: EmittedEvent[] = [];
    for (const [index, event] of events.entries()) {
      const record = records[index]!;
      const key = `${event.projectId} ${event.webhookId ?? ''}`;
      let webhooks = webhooksOf.get(key);
      if (!webhooks) {
        webhooks = webhookRepo.enabledWebhooks(
          event.projectId,
          { onlyWebhookId: event.webhookId, unwritten: true },
          transaction,
        );
        webhooksOf.set(key, webhooks);
      }
      const targets = (await webhooks).filter(
        (webhook) => event.webhookId !== undefined || webhook.events.includes(event.kind),
      );
      const rows = targets.map((webhook) => ({
        id: newId('dlv'),
        projectId: event.projectId,
        eventId: record.id,
        webhookId: webhook.id,
        dueAt: now,
        createdAt: now,
      }));
      deliveries.push(...rows);
      emitted.push({ ...toView(record), delivery_ids: rows.map((row) => row.id) });
    }
    // The daily numbers (GET /v1/stats) move in the same transaction as the events they count; a webhook
    // test send (to one webhook) is not something that happened to an email.
    const counted = events.filter((event) => event.webhookId === undefined);
    // Counted for /metrics only once they are committed: a rolled-back outcome batch happened to nobody.
    const committed = () => {
      if (counted.length > 0) metrics.eventsEmitted(counted.map((event) => event.kind));
    };
    return { now, records, counted, deliveries, emitted, committed };
  }

  /**
   * Stores events and one pending delivery per enabled webhook of their project subscribed to their kind,
   * in the caller's transaction: the outbox. The state change that caused an event, the event and its
   * deliveries commit together or not at all. The transaction must not have written webhooks (plan).
   */
  async function emitIn(transaction: Transaction, events: readonly NewEvent[]): Promise<EmittedEvent[]> {
    if (events.length === 0) return [];
    const { now, records, counted, deliveries, emitted, committed } = await plan(transaction, events);
    transaction.afterCommit(committed);
    // On PostgreSQL the events are stored in the counts' statement (a round trip fewer for every outcome
    // batch of the workers).
    if (writesInWith(engine)) {
      await stats.countEvents(counted, now, transaction, repo.insertStatement(records, transaction));
    } else {
      await repo.insert(records, transaction);
      await stats.countEvents(counted, now, transaction);
    }
    await enqueue(transaction, deliveries);
    return emitted;
  }

  /**
   * PostgreSQL: the events and their daily counts as parts of a caller's statement in `transaction` (one
   * that has not written webhooks: plan), each written only when the caller's `guard` holds; `committed()`
   * once they are. Undefined when an event goes to a webhook: its deliveries and their wake-up go through
   * emitIn.
   */
  async function emitWith(
    transaction: Transaction,
    events: readonly NewEvent[],
  ): Promise<EmitWith | undefined> {
    const { now, records, counted, deliveries, committed } = await plan(transaction, events);
    if (deliveries.length > 0) return undefined;
    return {
      writes: (param, guard) =>
        [
          records.length > 0 ? insertEventsWhere('events_written', records, param, guard) : '',
          stats.addCountsWhere('counts_written', eventIncrements(counted, now), param, guard),
        ].filter((text) => text !== ''),
      committed,
    };
  }

  async function find(projectId: string, id: string): Promise<EventRecord> {
    const record = isId('evt', id) ? await repo.find(projectId, id) : undefined;
    if (!record) throw notFound('event', id);
    return record;
  }

  return {
    emitIn,
    emitWith,

    /**
     * Before a transaction that emits: the webhooks' stamp read outside it (shared with other reads in
     * flight), so that its plan, within the stamp's lease, makes no round trip for it inside the transaction.
     * The sending worker's outcome transactions made one in three of four batches on PostgreSQL (bench/README.md).
     */
    beforeEmitting: (): Promise<void> => webhookRepo.readStamp(),

    /**
     * Emits one event: in `transaction` when given (with the change that caused it), else in its own. The
     * deliveries' workers wake once it commits.
     */
    async emit(
      projectId: string,
      kind: EventKind,
      data: Record<string, unknown>,
      options: EmitOptions & { transaction?: Transaction } = {},
    ): Promise<EmittedEvent> {
      const { transaction, ...rest } = options;
      const event = { projectId, kind, data, ...rest };
      const [emitted] = transaction
        ? await emitIn(transaction, [event])
        : await inTransaction(db, (own) => emitIn(own, [event]));
      return emitted!;
    },

    /** An email's events, oldest first: its timeline; in `transaction` when given. */
    forEmail: (projectId: string, emailId: string, transaction?: Transaction): Promise<EventRecord[]> =>
      repo.forEmail(projectId, emailId, transaction),

    async list(projectId: string, page: PageRequest, type?: string) {
      if (type !== undefined && !isEventKind(type)) {
        throw invalidParam('type', `Unknown event kind '${type}'; GET /v1/event-kinds lists them.`);
      }
      return mapPage(await repo.list(projectId, page, type), toView);
    },

    async get(projectId: string, id: string): Promise<EventWithDeliveriesView> {
      const record = await find(projectId, id);
      return { ...toView(record), deliveries: await deliveries.listForEvent(projectId, id, record.type) };
    },

    /**
     * Decides how a stored event is sent again, before any transaction (`redeliver` writes it): a new pending
     * delivery, due now, for each webhook it was delivered to (or just `webhookId`), going through the retry
     * schedule like any delivery. Earlier deliveries and
     * their attempts stay as they were, as history. Disabled webhooks get nothing: named alone, that is a
     * conflict; among all of the event's webhooks, they are skipped and listed.
     */
    async prepareRedeliver(
      projectId: string,
      id: string,
      options: { webhookId?: string } = {},
    ): Promise<RedeliveryPlan> {
      const record = await find(projectId, id);
      const earlier = [
        ...new Set((await deliveryRepo.listForEvent(projectId, id)).map((row) => row.webhook_id)),
      ];

      let targets: string[];
      let skipped: string[] = [];
      if (options.webhookId !== undefined) {
        const webhookId = options.webhookId;
        const [webhook] = isId('wh', webhookId) ? await repo.webhooks(projectId, [webhookId]) : [];
        if (!webhook) {
          throw new DomainError(
            'not_found',
            'resource_missing',
            `No webhook with id '${webhookId}'.`,
            'webhook_id',
          );
        }
        if (!webhook.enabled) {
          throw conflict(
            'webhook_disabled',
            `Webhook '${webhookId}' is disabled; enable it (PATCH enabled: true) to redeliver to it.`,
            'webhook_id',
          );
        }
        // A webhook that never had the event gets it only if it wants that kind: receivers are not sent
        // kinds they did not subscribe to (test sends are the one exception, and have their own route).
        if (!earlier.includes(webhookId) && !webhook.events.includes(record.type)) {
          throw invalidParam(
            'webhook_id',
            `Webhook '${webhookId}' neither received event '${id}' nor subscribes to '${record.type}'.`,
            'webhook_not_subscribed',
          );
        }
        targets = [webhookId];
      } else {
        const webhooks = await repo.webhooks(projectId, earlier);
        targets = webhooks.filter((webhook) => webhook.enabled).map((webhook) => webhook.id);
        skipped = webhooks.filter((webhook) => !webhook.enabled).map((webhook) => webhook.id);
      }

      const now = clock.now().toISOString();
      const rows = targets.map((webhookId) => ({
        id: newId('dlv'),
        projectId,
        eventId: id,
        webhookId,
        dueAt: now,
        createdAt: now,
      }));
      return {
        rows,
        view: {
          object: 'redelivery',
          event_id: id,
          delivery_ids: rows.map((row) => row.id),
          skipped_webhook_ids: skipped,
        },
      };
    },

    /** Writes a prepared redelivery's deliveries in `transaction`; the workers wake at its commit. */
    async redeliver(transaction: Transaction, plan: RedeliveryPlan): Promise<RedeliveryView> {
      await enqueue(transaction, plan.rows);
      return plan.view;
    },
  };
}

export type EventService = ReturnType<typeof createEventService>;
