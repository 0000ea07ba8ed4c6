import type { Clock } from '../../lib/clock.ts';
import { invalidParam } from '../../lib/errors.ts';
import type { SenderAuthentication } from '../domains/domains.service.ts';
import type { EmailRepo } from './emails.repo.ts';
import { findSubmittedLinks } from './submitted-html.ts';
import { parseList } from './send-checks.ts';
import type { KeySender, SendPlan, SendPreparer } from './send-prepare.ts';

/** An SMTP submission as the emails service takes it (read by the submission module). */
export interface Submission {
  /** The From field (`Name <a@b>` or `a@b`). */
  from: string;
  /**
   * The addresses of the message's Sender, Resent-From and Resent-Sender fields, by field: each passes the
   * rule From passes (the API has no such fields: it refuses them as reserved headers).
   */
  senders: Array<{ field: string; address: string }>;
  /** The envelope's recipients (RCPT TO). */
  recipients: string[];
  /** The addresses of the To and Cc fields: which recipients are to and cc (the others are bcc). */
  to: string[];
  cc: string[];
  replyTo: string[];
  subject: string;
  messageId: string | null;
  tags: Record<string, string>;
  sendAt: string | undefined;
  /** One-click unsubscribe (List-Unsubscribe per recipient). */
  unsubscribe: boolean;
  /** Opens and clicks tracked in the message's html part(s), as an API send's tracking. */
  track: { opens: boolean; clicks: boolean };
  /** The SMTP AUTH username. */
  username: string;
  /** The message as it is sent, given its Message-ID and the time it was accepted. */
  build(messageId: string, acceptedAt: Date): Buffer[];
}

/** A client that submits the same Message-ID again within this gets the first email back. */
export const SUBMISSION_REPEAT_WINDOW_MS = 24 * 3_600_000;

export interface SubmissionPlannerDeps {
  repo: Pick<EmailRepo, 'submittedSince'>;
  clock: Clock;
  preparer: Pick<SendPreparer, 'prepare' | 'authorizeSenderDomain'>;
}

export function createSubmissionPlanner({ repo, clock, preparer }: SubmissionPlannerDeps) {
  const { prepare, authorizeSenderDomain } = preparer;
  return {
    /**
     * Checks an SMTP submission as a send (the same rules: sender domain, addresses, tags, schedule, recipient
     * cap), before any transaction; `accept` then stores it. The envelope's recipients are who receives it:
     * those in To or Cc as such, the others as bcc. The message travels as submitted (`submitted`): its Message-ID
     * is the client's when it gave one.
     */
    async prepareSubmission(projectId: string, submission: Submission, sender: KeySender): Promise<SendPlan> {
      const now = clock.now();
      const inHeader = (list: readonly string[]) => new Set(list.map((address) => address.toLowerCase()));
      const to = inHeader(submission.to);
      const cc = inHeader(submission.cc);
      const role = (address: string) =>
        to.has(address.toLowerCase()) ? 'to' : cc.has(address.toLowerCase()) ? 'cc' : 'bcc';
      const decided = new Map<string, SenderAuthentication>();
      const email = await prepare(
        projectId,
        {
          from: submission.from,
          to: submission.recipients.filter((address) => role(address) === 'to'),
          cc: submission.recipients.filter((address) => role(address) === 'cc'),
          bcc: submission.recipients.filter((address) => role(address) === 'bcc'),
          ...(submission.replyTo.length > 0 ? { reply_to: submission.replyTo } : {}),
          subject: submission.subject,
          text: '',
          tags: submission.tags,
          ...(submission.sendAt !== undefined ? { scheduled_at: submission.sendAt } : {}),
          tracking: submission.track,
          unsubscribe: submission.unsubscribe,
        },
        now,
        '',
        sender.domainId,
        undefined,
        decided,
      );
      // Who sent it for the author, or sent it on: a mailing list's Sender, a forward's Resent-From. Each is a
      // sending address like From, so each passes From's rule (a foreign one would be signed as ours too).
      for (const { field, address } of submission.senders) {
        const [parsed] = parseList(address, field);
        await authorizeSenderDomain(projectId, parsed!.domain, field, sender.domainId, decided);
      }
      const messageId = submission.messageId ?? email.messageId;
      const submitted = submission.build(messageId, now);
      // The links are found in the html part(s) as sent, once, as for an API send's html; a message whose
      // MIME cannot be read part by part is refused here rather than failing at each attempt.
      let tracking = email.tracking;
      if (tracking && (tracking.opens || tracking.clicks)) {
        let links: string[];
        try {
          links = await findSubmittedLinks(submitted);
        } catch {
          throw invalidParam(
            'X-Postwire-Track',
            "X-Postwire-Track: the message's MIME parts cannot be read to find its html; send it without tracking",
          );
        }
        tracking = { ...tracking, links: tracking.clicks ? links : [] };
      }
      return {
        emails: [
          {
            ...email,
            html: null,
            text: null,
            messageId,
            source: 'smtp',
            smtpUsername: submission.username,
            submitted,
            tracking,
          },
        ],
        now,
      };
    },

    /** The email an SMTP client already submitted with this Message-ID in the last 24 hours. */
    submittedBefore(projectId: string, messageId: string): Promise<string | undefined> {
      const since = new Date(clock.now().getTime() - SUBMISSION_REPEAT_WINDOW_MS).toISOString();
      return repo.submittedSince(projectId, messageId, since);
    },
  };
}
