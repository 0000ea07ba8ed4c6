import type { PageRequest } from '../../db/pagination.ts';
import type { ReceivedEmailRecord } from '../inbound/received.repo.ts';
import { receivedEventData } from '../inbound/received-view.ts';
import type { DeliveryStatus } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { RequeueRequest } from '../deliveries/deliveries.repo.ts';
import { type Clock, instantOf } from '../../lib/clock.ts';
import { conflict, invalidParam, notFound } from '../../lib/errors.ts';
import type { DeliveryService } from '../deliveries/deliveries.service.ts';
import { type EventKind, isEventKind } from '../event-kinds/event-kinds.ts';
import type { EventService } from '../events/events.service.ts';
import type { WebhookRepo } from '../webhooks/webhooks.repo.ts';
import type {
  RecoverWebhookInput,
  TestWebhookInput,
  WebhookRecoveryView,
  WebhookTestView,
} from './webhook-operations.schemas.ts';
import { loadWebhook } from '../webhooks/webhooks.service.ts';

// Operating a webhook's deliveries: its delivery log, test sends and recovery of failed deliveries. Apart
// from the webhook service (its configuration) because these need the event and delivery services.

export interface WebhookOperationsDeps {
  repo: WebhookRepo;
  clock: Clock;
  /** Test sends go through the event service like every event. */
  events: EventService;
  deliveries: DeliveryService;
  /** How long a test send waits for its first attempt: the worker's timeout plus time to claim it. */
  testWaitMs: number;
}

type RecoveryPlan = RequeueRequest;

/** The oldest `since` a recovery takes: a guard against re-sending months of history by a typo. */
export const RECOVER_MAX_AGE_MS = 30 * 86_400_000;

const SAMPLE_RECIPIENT = 'recipient@example.com';

const SAMPLE_RECEIVED: ReceivedEmailRecord = {
  id: 'rcv_test',
  projectId: 'proj_test',
  inboundId: 'inb_test',
  routeId: 'rte_test',
  recipient: 'support+1234@example.com',
  mailboxHash: '1234',
  receivedAt: '2026-11-22T10:00:00.000Z',
  mailFrom: 'customer@example.org',
  fromAddress: 'customer@example.org',
  subject: 'Re: A test event from Postwire',
  messageId: '<reply-test@example.org>',
  inReplyToEmailId: 'msg_test',
  inReplyToRecipient: 'customer@example.org',
  status: 'received',
  size: 1432,
  attachmentCount: 0,
  content: {
    readable: true,
    from: { address: 'customer@example.org', name: 'A Customer' },
    to: [{ address: 'support+1234@example.com', name: '' }],
    cc: [],
    reply_to: [],
    subject: 'Re: A test event from Postwire',
    date: '2026-11-22T10:00:00.000Z',
    message_id: '<reply-test@example.org>',
    in_reply_to: '<test@example.com>',
    references: ['<test@example.com>'],
    text: 'Thanks, that works.\n\nOn Sun, Nov 22, 2026 Postwire wrote:\n> A test event from Postwire\n',
    html: null,
    reply_text: 'Thanks, that works.',
    headers: [],
    attachments: [],
  },
  authentication: {
    spf: { result: 'pass', domain: 'example.org' },
    dkim: [{ domain: 'example.org', selector: 'mail', result: 'pass', aligned: true }],
    dmarc: { result: 'pass', policy: 'none', domain: 'example.org' },
    arc: null,
    header:
      'mx.example.com; spf=pass smtp.mailfrom=example.org; dkim=pass header.d=example.org; dmarc=pass header.from=example.org',
  },
  spam: null,
  createdAt: '2026-11-22T10:00:00.000Z',
};

// What each kind adds to the email fields, as the sending worker fills it in. A Record over every kind, so a
// new kind cannot be added without its sample.
const SAMPLE_DETAILS: Record<EventKind, Record<string, unknown>> = {
  'email.sent': { smtp_response: '250 2.0.0 OK: queued as 4F2A1C' },
  'email.delivered': { smtp_response: '250 2.0.0 OK: queued as 4F2A1C' },
  'email.delivery_delayed': { smtp_response: '451 4.7.1 Greylisted, please try again later' },
  'email.bounced': {
    smtp_response: '550 5.1.1 <recipient@example.com>: no such user',
    bounce: {
      type: 'hard',
      status: '5.1.1',
      diagnostic: '550 5.1.1 <recipient@example.com>: no such user',
      reporting_mta: null,
    },
  },
  'email.failed': { error: 'connection timed out' },
  'email.complained': {},
  'email.suppressed': { suppression: { reason: 'hard_bounce', created_at: '2026-11-22T10:00:00.000Z' } },
  'email.opened': {
    open: { first: true, user_agent: 'Mozilla/5.0 (Macintosh) Thunderbird/128.0', automated: false },
  },
  'email.clicked': {
    click: {
      url: 'https://example.com/',
      user_agent: 'Mozilla/5.0 (Windows NT 10.0) Firefox/133.0',
      automated: false,
    },
  },
  'email.unsubscribed': { unsubscribe: { method: 'one_click' } },
  // Received mail is no email of ours: its sample is a whole received email (testEventData).
  'email.received': {},
  'domain.verified': { status: 'verified', previous_status: 'pending' },
  'domain.failed': { status: 'failed', previous_status: 'verified' },
  'project.warning': {
    state: 'warning',
    previous_state: 'ok',
    reason: 'complaint_rate',
    complaint_rate: 0.0015,
    holds: 'nothing',
  },
  'project.sending_paused': {
    state: 'paused',
    previous_state: 'warning',
    reason: 'complaint_rate',
    complaint_rate: 0.0042,
    holds: 'broadcasts',
  },
  'project.sending_resumed': {
    state: 'ok',
    previous_state: 'paused',
    reason: 'complaint_rate',
    complaint_rate: 0.0042,
    holds: 'nothing',
    resumed_by: 'api',
  },
  'contact.created': {},
  'contact.updated': { first_name: 'Ada', updated_at: '2026-11-22T10:05:00.000Z' },
  'contact.deleted': {},
  'contact.topics_updated': {},
  'broadcast.sent': {},
  'destination.suspended': {
    suspended_until: '2026-11-22T10:05:00.000Z',
    rate_per_minute: 150,
    last_deferral: '421 4.7.28 [203.0.113.7] Our system has detected an unusual rate of unsolicited mail',
  },
  'destination.resumed': {
    suspended_until: null,
    rate_per_minute: 150,
    last_deferral: '421 4.7.28 [203.0.113.7] Our system has detected an unusual rate of unsolicited mail',
  },
};

/** The data of a test event: shaped like a real email event of that kind, marked `test: true`. */
export function testEventData(kind: EventKind): Record<string, unknown> {
  // Domain events are about a domain, not an email.
  if (kind.startsWith('domain.')) {
    return {
      test: true,
      domain_id: 'dom_test',
      name: 'example.com',
      challenge_required: false,
      receiving: false,
      receiving_verified: false,
      records: [],
      ...SAMPLE_DETAILS[kind],
    };
  }
  // Project events are about the reputation breaker's rates (reputation.service.ts's eventData).
  if (kind.startsWith('project.')) {
    return {
      test: true,
      project_id: 'prj_test',
      domain: 'example.com',
      hard_bounce_rate: 0.004,
      sent: 12_000,
      bounced: 60,
      bounced_hard: 48,
      complained: 50,
      thresholds: {
        window_days: 7,
        hard_bounce_warning: 0.02,
        hard_bounce_limit: 0.05,
        complaint_warning: 0.001,
        complaint_limit: 0.003,
        min_bounce_volume: 200,
        min_complaint_volume: 1000,
      },
      ...SAMPLE_DETAILS[kind],
    };
  }
  // Destination events are the operator's, about a destination of direct delivery (destination-events.ts).
  if (kind.startsWith('destination.')) {
    return {
      test: true,
      destination: 'google',
      source: 'default',
      provider: 'google',
      connections: 3,
      ...SAMPLE_DETAILS[kind],
    };
  }
  if (kind === 'broadcast.sent') {
    return {
      test: true,
      id: 'bc_test',
      name: 'November newsletter',
      segment_id: 'seg_test',
      topic_id: null,
      copies: 2,
      excluded: 1,
      sent_at: '2026-11-22T10:00:00.000Z',
    };
  }
  if (kind === 'contact.topics_updated') {
    return {
      test: true,
      id: 'con_test',
      email: SAMPLE_RECIPIENT,
      topics: [{ id: 'top_test', subscription: 'opt_out', previous_subscription: 'opt_in' }],
    };
  }
  // Contact events are about a contact (contactEventData's fields).
  if (kind.startsWith('contact.')) {
    return {
      test: true,
      id: 'con_test',
      email: SAMPLE_RECIPIENT,
      first_name: null,
      last_name: null,
      unsubscribed: false,
      properties: {},
      segment_ids: [],
      created_at: '2026-11-22T10:00:00.000Z',
      updated_at: '2026-11-22T10:00:00.000Z',
      ...SAMPLE_DETAILS[kind],
    };
  }
  if (kind === 'email.received') return { test: true, ...receivedEventData(SAMPLE_RECEIVED) };
  return {
    test: true,
    email_id: 'msg_test',
    from: 'Postwire <test@example.com>',
    to: [SAMPLE_RECIPIENT],
    subject: 'A test event from Postwire',
    tags: {},
    recipient: SAMPLE_RECIPIENT,
    ...SAMPLE_DETAILS[kind],
  };
}

export function createWebhookOperations({
  repo,
  clock,
  events,
  deliveries,
  testWaitMs,
}: WebhookOperationsDeps) {
  const load = (projectId: string, id: string) => loadWebhook(repo, projectId, id);
  const disabledConflict = (id: string, what: string) =>
    conflict(
      'webhook_disabled',
      `Webhook '${id}' is disabled; enable it first (PATCH /v1/webhooks/${id} with enabled: true) to ${what}.`,
    );

  return {
    /** The webhook's delivery log, newest first, each delivery with its attempts. */
    async listDeliveries(projectId: string, id: string, page: PageRequest, status?: DeliveryStatus) {
      await load(projectId, id);
      return deliveries.listForWebhook(projectId, id, page, status);
    },

    /** One delivery of the webhook's log, with its attempts. */
    async getDelivery(projectId: string, id: string, deliveryId: string) {
      await load(projectId, id);
      const delivery = await deliveries.getForWebhook(projectId, id, deliveryId);
      if (!delivery) throw notFound('delivery', deliveryId);
      return delivery;
    },

    /**
     * Sends a test event to this webhook alone, through the queue like any delivery (so a failed test is
     * retried on the schedule), and answers with the first attempt's outcome once a worker has made it.
     */
    async test(projectId: string, id: string, input: TestWebhookInput): Promise<WebhookTestView> {
      const webhook = await load(projectId, id);
      const kind = input.type ?? 'email.sent';
      if (!isEventKind(kind)) {
        throw invalidParam('type', `Unknown event kind '${kind}'; GET /v1/event-kinds lists them.`);
      }
      if (!webhook.enabled) throw disabledConflict(id, 'test it');
      const event = await events.emit(projectId, kind, testEventData(kind), { webhookId: id });
      const deliveryId = event.delivery_ids[0];
      // Disabled between the check and the emit: nothing was queued.
      if (deliveryId === undefined) throw disabledConflict(id, 'test it');

      const { delivery, attempt } = await deliveries.waitForFirstAttempt(projectId, deliveryId, testWaitMs);
      if (!delivery) throw notFound('webhook', id); // deleted while we waited, with its deliveries
      const base = {
        object: 'webhook_test' as const,
        webhook_id: id,
        event_id: event.id,
        delivery_id: deliveryId,
      };
      if (attempt) {
        const ok = attempt.error === null && attempt.status_code !== null && attempt.status_code < 300;
        return {
          ...base,
          success: ok,
          delivery_status: delivery.status,
          attempted_at: attempt.attempted_at,
          status_code: attempt.status_code,
          duration_ms: Number(attempt.duration_ms),
          error: attempt.error,
          response_excerpt: attempt.response_excerpt,
        };
      }
      const error =
        delivery.status === 'pending'
          ? `no attempt within ${testWaitMs} ms: no delivery worker has picked it up yet; it stays queued and is sent when one does`
          : (delivery.last_error ?? 'not sent');
      return {
        ...base,
        success: false,
        delivery_status: delivery.status,
        attempted_at: null,
        status_code: null,
        duration_ms: null,
        error,
        response_excerpt: null,
      };
    },

    /**
     * Re-queues the webhook's failed deliveries created since `since` (each starts the retry schedule over;
     * its earlier attempts stay in the log). The webhook must be enabled: recovering into a disabled one
     * would only fail them again, and enabling is the user's call, not a side effect.
     */
    /** Checks a recovery and reads the webhook, before any transaction; `recover` then writes it. */
    async prepareRecover(projectId: string, id: string, input: RecoverWebhookInput): Promise<RecoveryPlan> {
      const webhook = await load(projectId, id);
      const since = instantOf(input.since).getTime();
      const now = clock.now().getTime();
      if (Number.isNaN(since)) throw invalidParam('since', 'since must be an ISO 8601 date-time or a date.');
      if (since > now) throw invalidParam('since', 'since must not be in the future.');
      if (since < now - RECOVER_MAX_AGE_MS) {
        throw invalidParam('since', 'since must be within the last 30 days.');
      }
      if (!webhook.enabled) throw disabledConflict(id, 'recover its deliveries');
      return {
        projectId,
        webhookId: id,
        since: new Date(since).toISOString(),
        now: new Date(now).toISOString(),
      };
    },

    async recover(transaction: Transaction, plan: RecoveryPlan): Promise<WebhookRecoveryView> {
      const requeued = await deliveries.requeueFailed(transaction, plan);
      return { object: 'webhook_recovery', webhook_id: plan.webhookId, since: plan.since, requeued };
    },
  };
}

export type WebhookOperations = ReturnType<typeof createWebhookOperations>;
