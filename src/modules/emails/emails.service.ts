import type { Kysely } from 'kysely';
import type { Database } from '../../db/schema.ts';
import type { Clock } from '../../lib/clock.ts';
import type { Notifier } from '../../queue/notifier.ts';
import type { TemplateRenderer } from '../templates/render.ts';
import type { TemplateRepo } from '../templates/templates.repo.ts';
import type { EmailRepo, NewEmail } from './emails.repo.ts';
import type { AcceptedEmailView, SendEmailInput } from './emails.schemas.ts';
import type { DomainService, SenderAuthentication } from '../domains/domains.service.ts';
import type { EventService } from '../events/events.service.ts';
import type { SuppressionRepo } from '../suppressions/suppressions.repo.ts';
import type { DecodedFields } from '../../lib/base64.ts';
import type { EngagementDefaults } from '../../config.ts';
import type { MetricsRecorder } from '../metrics/instruments.ts';
import type { TrackingRepo } from './tracking.repo.ts';
import type { ReputationService } from '../reputation/reputation.service.ts';
import { createSendPreparer, type KeySender, type SendPlan } from './send-prepare.ts';
import { createSendStore } from './send-store.ts';
import { createSubmissionPlanner } from './submission-plan.ts';
import { createEmailViews } from './email-views.ts';
import { createScheduledChanges } from './scheduled-changes.ts';

/*
 * The emails service, as the rest of the code calls it: a send read top to bottom is send-checks.ts (the
 * input) → send-prepare.ts (render, tracking, suppression, sender) → send-store.ts (write, send groups,
 * daily limit); submission-plan.ts makes an SMTP submission a send; email-views.ts shows emails;
 * scheduled-changes.ts cancels and reschedules.
 */

export { MAX_RECIPIENTS, TAG_PATTERN } from './send-checks.ts';
export type { KeySender, SendPlan } from './send-prepare.ts';
export { DailyLimitError } from './send-store.ts';
export { SUBMISSION_REPEAT_WINDOW_MS, type Submission } from './submission-plan.ts';
export { toEmailSummary } from './email-views.ts';

export interface EmailServiceDeps {
  repo: EmailRepo;
  templates: TemplateRepo;
  renderer: TemplateRenderer;
  clock: Clock;
  /** Recipients a project may send to per UTC day; 0: no limit. */
  dailyLimit: number;
  /** Wakes this process's sending worker when emails are accepted. */
  notifier: Notifier;
  /** An email's timeline is its events; a suppressed recipient's event is emitted with the email. */
  events: Pick<EventService, 'forEmail' | 'emit'>;
  /** Counts accepted emails (/metrics); nothing is counted when absent. */
  metrics?: Pick<MetricsRecorder, 'emailsAccepted'> | undefined;
  /**
   * The projects' suppression lists: read before a grouped send's transaction (on PostgreSQL by its one
   * statement, as a guard: send-store.ts), in a keyed send's.
   */
  suppressions: Pick<SuppressionRepo, 'matchingIn' | 'matchingStatement'>;
  /** Where sends outside an Idempotency-Key's transaction open their own. */
  db: Kysely<Database>;
  /** Concurrent sends written together, at most this many emails a group (send-groups.ts); unset: each alone. */
  sendGroups?: { maxEmails: number; inFlight?: number | undefined } | undefined;
  /** Which From domains the project may send as, and how they are signed (the domains module). */
  senders?: Pick<DomainService, 'authorizeSender' | 'authorizeKeyDomain'> | undefined;
  /** Opens, clicks and one-click unsubscribe: PUBLIC_URL, the defaults, and where the settings are kept. */
  engagement: EmailEngagementDeps;
  /** The reputation breaker: a send from a paused project or domain is refused (403 `sending_paused`). */
  reputation?: Pick<ReputationService, 'assertSendingAllowed'> | undefined;
}

export interface EmailEngagementDeps {
  /** Unset: a send asking for tracking or unsubscribe is refused (422). */
  publicUrl: string | undefined;
  defaults: EngagementDefaults;
  repo: TrackingRepo;
}

export function createEmailService(deps: EmailServiceDeps) {
  const { clock } = deps;
  const preparer = createSendPreparer(deps);
  const sendStore = createSendStore({ ...deps, markSuppressed: preparer.markSuppressed });
  const views = createEmailViews(deps);
  const { prepare } = preparer;

  const acceptedViews = (plan: SendPlan): AcceptedEmailView[] =>
    plan.emails.map((email) => ({ id: email.id, object: 'email' as const }));

  return {
    /**
     * Validates and renders one send (reading its template and sender), before any transaction. `decoded`: its
     * files, when the body was large enough to be decoded on a thread (the request's `decodedFields`).
     */
    async prepareSend(
      projectId: string,
      input: SendEmailInput,
      sender: KeySender,
      decoded?: DecodedFields,
    ): Promise<SendPlan> {
      const now = clock.now();
      return { emails: [await prepare(projectId, input, now, '', sender.domainId, decoded)], now };
    },

    ...createSubmissionPlanner({ ...deps, preparer }),

    /** All or nothing: one bad email refuses the batch (its index leads the param: `[3].to[0]`). */
    async prepareBatch(
      projectId: string,
      inputs: SendEmailInput[],
      sender: KeySender,
      decoded?: DecodedFields,
    ): Promise<SendPlan> {
      const now = clock.now();
      const emails: NewEmail[] = [];
      const decided = new Map<string, SenderAuthentication>();
      for (const [index, input] of inputs.entries())
        emails.push(await prepare(projectId, input, now, `[${index}].`, sender.domainId, decoded, decided));
      return { emails, now };
    },

    /** What a send answers once its emails are stored. */
    acceptedViews,

    ...sendStore,
    get: views.get,
    list: views.list,
    raw: views.raw,
    attachments: views.attachments,
    attachment: views.attachment,
    ...createScheduledChanges({ ...deps, views }),
  };
}

export type EmailService = ReturnType<typeof createEmailService>;
