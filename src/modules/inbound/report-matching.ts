import type { InboundKind, InboundStatus } from '../../db/schema.ts';
import type { ByteChunks } from '../../lib/byte-chunks.ts';
import { isId } from '../../lib/ids.ts';
import { classifyBounce } from '../emails/bounce.ts';
import { PENDING } from '../emails/status.ts';
import type { RecipientRepo, ReportedOutcome, ReportedRecipient } from '../emails/recipients.repo.ts';
import type { ReportedEffect } from '../emails/recipients.ts';
import type { ReturnPath } from '../emails/return-path.ts';
import { type FeedbackLoops, type ReportAuthenticator, speaksFor } from './report-authentication.ts';
import type { DsnRecipient, ReadMessage, Report } from './report-parser.ts';

// From a received message to what it says about our recipients. The recipient is found by the return path
// the report was mailed to (VERP: its HMAC tag proves we made it, and only that recipient's copy carries it),
// else, when it went to no return path of ours (a feedback loop's fixed address, a postmaster), by the
// Message-ID (or ENVID) of the reported message together with the recipient address the report gives. Every
// recipient of a message knows its Message-ID, so a report matched that way changes a recipient only when
// the recipient's mail provider signed it (report-authentication.ts); otherwise it is `unverified`. A return
// path whose tag does not verify is a forgery: nothing is matched by any other means then.

/** How a message was read: the effects to apply, or why there are none. */
export interface Interpretation {
  kind: InboundKind;
  subject: string | null;
  /**
   * Set when there is nothing to apply (ignored, unmatched, unverified, unreadable) or it was applied already
   * (a List-Unsubscribe mail; a DMARC report, `no_change` when stored before); else decided when the
   * effects are applied.
   */
  status?: Exclude<InboundStatus, 'pending'>;
  /** The project it concerns when it names no recipient (a DMARC report). */
  projectId?: string | null;
  /** An unverified report's recipient: shown to its project, changed in nothing. */
  about?: ReportedRecipient;
  detail: string;
  effects: ReportedEffect[];
  /**
   * True when a recipient it is about is still being sent (the report outran the worker recording the
   * relay's 250): it is read again shortly, since applying it now would be overwritten by that record.
   */
  early?: boolean;
}

const KIND: Record<Report['kind'], InboundKind> = {
  'delivery-status': 'delivery_status',
  feedback: 'feedback',
  'auto-reply': 'auto_reply',
  unreadable: 'unreadable',
};

const OUTCOME: Record<DsnRecipient['action'], ReportedOutcome> = {
  failed: 'bounced',
  delayed: 'delayed',
  delivered: 'delivered',
  relayed: 'delivered',
  expanded: 'delivered',
};

type Found = { recipients: ReportedRecipient[]; how: string; byReturnPath: boolean } | { refused: string };

export function createReportMatcher(deps: {
  recipients: Pick<RecipientRepo, 'findById' | 'findEmail' | 'recipientsOf'>;
  returnPath: ReturnPath | undefined;
  /** Checks who signed a report that names its recipient by Message-ID (DKIM keys from DNS_SERVERS). */
  authenticator: ReportAuthenticator;
  feedbackLoops: FeedbackLoops;
}) {
  const { returnPath } = deps;

  /** The recipients named by return paths of ours among `addresses`; a forged one refuses them all. */
  async function byReturnPath(addresses: readonly (string | null)[]): Promise<Found | undefined> {
    if (!returnPath) return undefined;
    const ids = new Set<string>();
    for (const address of addresses) {
      if (!address || !returnPath.isReturnPath(address)) continue;
      const id = returnPath.recipientOf(address);
      if (!id) return { refused: `the return path ${address} does not verify (forged or altered)` };
      ids.add(id);
    }
    if (ids.size === 0) return undefined;
    const found: ReportedRecipient[] = [];
    for (const id of ids) {
      const recipient = await deps.recipients.findById(id);
      if (recipient) found.push(recipient);
    }
    if (found.length === 0) return { refused: 'its return path names a recipient that no longer exists' };
    return { recipients: found, how: 'by its return path', byReturnPath: true };
  }

  /** The recipients of the reported email whose addresses the report names. */
  async function byMessage(
    reference: { messageId: string | null; emailId: string | null },
    addresses: readonly (string | null)[],
  ): Promise<Found> {
    const email = await deps.recipients.findEmail(reference);
    if (!email) return { refused: 'it names no message of ours (no return path, no known Message-ID)' };
    const all = await deps.recipients.recipientsOf(email.id);
    const named = new Set(addresses.filter((address) => address !== null).map((a) => a!.toLowerCase()));
    // A complaint often hides the recipient's address: a message with one recipient is still certain.
    const recipients =
      named.size === 0 && all.length === 1
        ? all
        : all.filter((recipient) => named.has(recipient.address.toLowerCase()));
    if (recipients.length === 0)
      return { refused: `it names message ${email.messageId} but none of its recipients` };
    return {
      recipients,
      how: 'by the Message-ID of the reported message and the recipient address',
      byReturnPath: false,
    };
  }

  /** The report's entry for a recipient: the one naming its address, or the only/first one. */
  const entryFor = (entries: DsnRecipient[], recipient: ReportedRecipient): DsnRecipient => {
    const address = recipient.address.toLowerCase();
    return (
      entries.find((entry) => entry.finalRecipient === address || entry.originalRecipient === address) ??
      entries[0]!
    );
  };

  function deliveryEffects(
    report: Extract<Report, { kind: 'delivery-status' }>,
    recipients: ReportedRecipient[],
    messageId: string,
  ): ReportedEffect[] {
    return recipients.map((recipient) => {
      const entry = entryFor(report.recipients, recipient);
      const outcome = OUTCOME[entry.action];
      const reportingMta = report.reportingMta ?? entry.remoteMta;
      const said = { status: entry.status, diagnostic: entry.diagnostic, reporting_mta: reportingMta };
      const base = { recipient, outcome, detail: entry.diagnostic };
      if (outcome === 'bounced') {
        const bounce = classifyBounce(entry.diagnostic, { status: entry.status, reportingMta });
        return { ...base, bounce, data: { bounce, inbound_message_id: messageId } };
      }
      if (outcome === 'delayed') return { ...base, data: { delay: said, inbound_message_id: messageId } };
      return {
        ...base,
        data: { delivery: { ...said, remote_mta: entry.remoteMta }, inbound_message_id: messageId },
      };
    });
  }

  return {
    /**
     * Finds what a stored message, as the report reader read it, says about which recipients (reads only;
     * writes nothing).
     */
    async interpret(message: {
      id: string;
      rcptTo: readonly string[];
      /** The message as received: its DKIM signatures are checked when it names a recipient by Message-ID. */
      raw: ByteChunks;
      read: ReadMessage;
    }): Promise<Interpretation> {
      const { report, subject } = message.read;
      const kind = KIND[report.kind];
      if (report.kind === 'unreadable')
        return { kind, subject, status: 'unreadable', detail: report.reason, effects: [] };
      if (report.kind === 'auto-reply') {
        return {
          kind,
          subject,
          status: 'ignored',
          detail: `an auto-reply (${report.reason}), not a report`,
          effects: [],
        };
      }

      const envelope = await byReturnPath(message.rcptTo);
      let found: Found;
      if (report.kind === 'delivery-status') {
        found =
          envelope ??
          (await byMessage(
            {
              messageId: report.originalMessageId,
              emailId: report.envelopeId && isId('msg', report.envelopeId) ? report.envelopeId : null,
            },
            report.recipients.flatMap((entry) => [entry.finalRecipient, entry.originalRecipient]),
          ));
      } else {
        found =
          envelope ??
          (await byReturnPath([report.originalReturnPath])) ??
          (await byMessage({ messageId: report.originalMessageId, emailId: null }, [
            report.originalRecipient,
          ]));
      }
      if ('refused' in found)
        return { kind, subject, status: 'unmatched', detail: found.refused, effects: [] };

      // A report that names another message than the one its return path was made for is not believed.
      const reported = report.originalMessageId;
      if (reported && found.recipients.some((recipient) => recipient.email.messageId !== reported)) {
        return {
          kind,
          subject,
          status: 'unmatched',
          detail: `it names message ${reported}, not the one its return path was made for`,
          effects: [],
        };
      }

      // Matched by what any recipient knows: believed only when the recipient's provider signed it. The DKIM
      // key lookups happen here, before the transaction that applies the report.
      if (!found.byReturnPath) {
        // Only a message the parse thread read within its caps gets here (INBOUND_MAX_BYTES bounds what one
        // may be): read in its chunks, never joined.
        const signer = await deps.authenticator.signerOf(message.raw);
        const vouchers = new Set<string>();
        for (const recipient of found.recipients) {
          const check = speaksFor(signer, recipient.address, deps.feedbackLoops);
          if (!check.ok) {
            return {
              kind,
              subject,
              status: 'unverified',
              about: recipient,
              detail: `it names ${recipient.address} by the Message-ID of the reported message, not by a return path of ours, and ${check.why}`,
              effects: [],
            };
          }
          vouchers.add(check.by);
        }
        found = { ...found, how: `${found.how}, vouched for by ${[...vouchers].join(', ')}` };
      }

      if (found.recipients.some((recipient) => PENDING.has(recipient.status))) {
        return { kind, subject, detail: 'its recipient is still being sent', effects: [], early: true };
      }
      const effects =
        report.kind === 'delivery-status'
          ? deliveryEffects(report, found.recipients, message.id)
          : found.recipients.map((recipient) => ({
              recipient,
              outcome: 'complained' as const,
              detail: `${report.feedbackType} report${report.userAgent ? ` (${report.userAgent})` : ''}`,
              data: {
                complaint: { feedback_type: report.feedbackType, user_agent: report.userAgent },
                inbound_message_id: message.id,
              },
            }));
      return { kind, subject, detail: `matched ${found.how}`, effects };
    },
  };
}

export type ReportMatcher = ReturnType<typeof createReportMatcher>;
