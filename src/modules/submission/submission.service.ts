import { allows } from '../../http/auth.ts';
import type { ByteChunks } from '../../lib/byte-chunks.ts';
import { DomainError } from '../../lib/errors.ts';
import type { EmailService } from '../emails/emails.service.ts';
import type { ProjectService } from '../projects/projects.service.ts';
import type { SubmissionCaller } from './submission.listener.ts';
import { messageToSend, readSubmission, SubmissionRefusal } from './submitted-message.ts';

// What the submission server does with a session's key and each message: the key checked as the HTTP API
// checks a bearer token, the message read and handed to the emails service as a send (its rules, its tables,
// its send groups), so an SMTP email is an email like any other.

/** A session's caller with its key, kept to check at each message that it still may send. */
interface KeyedCaller extends SubmissionCaller {
  key: string;
}

export function createSubmissionService({
  projects,
  emails,
}: {
  projects: Pick<ProjectService, 'authenticate'>;
  emails: Pick<EmailService, 'prepareSubmission' | 'submittedBefore' | 'accept' | 'fitsDailyLimit'>;
}) {
  /** The caller, undefined for an unknown or revoked key; a key that may not send is refused by name. */
  async function authenticate(username: string, password: string): Promise<KeyedCaller | undefined> {
    let caller;
    try {
      caller = await projects.authenticate(password);
    } catch (error) {
      if (error instanceof DomainError) return undefined;
      throw error;
    }
    // Submitting is sending: the rule of the API's send routes (http/auth.ts).
    if (!allows(caller.permission, 'sending_access')) {
      throw new SubmissionRefusal(
        535,
        `5.7.8 This API key is ${caller.permission}: SMTP submission needs a sending_access or full_access key`,
      );
    }
    return { ...caller, username: username.slice(0, 200), key: password };
  }

  return {
    authenticate,

    async stillValid(caller: SubmissionCaller): Promise<boolean> {
      try {
        return (await authenticate(caller.username, (caller as KeyedCaller).key)) !== undefined;
      } catch (error) {
        if (error instanceof SubmissionRefusal) return false;
        throw error;
      }
    },

    /** Whether a message to `recipients` still fits the project's daily limit (RCPT's early answer). */
    withinDailyLimit(caller: SubmissionCaller, recipients: readonly string[]): Promise<boolean> {
      return emails.fitsDailyLimit(caller.projectId, recipients);
    },

    /** Stores a submitted message as an email (or finds the one a retry repeats); the 250's text. */
    async submit(
      caller: SubmissionCaller,
      envelope: { from: string; to: string[] },
      raw: ByteChunks,
    ): Promise<string> {
      const message = readSubmission(raw);
      if (message.from === null) throw new SubmissionRefusal(550, '5.6.0 The message has no From header');
      if (message.messageId !== null) {
        const before = await emails.submittedBefore(caller.projectId, message.messageId);
        if (before) return `2.0.0 Already accepted as ${before}`;
      }
      const plan = await emails.prepareSubmission(
        caller.projectId,
        {
          from: message.from,
          senders: message.senders,
          recipients: envelope.to,
          to: message.to,
          cc: message.cc,
          replyTo: message.replyTo,
          subject: message.subject,
          messageId: message.messageId,
          tags: message.tags,
          sendAt: message.sendAt,
          unsubscribe: message.unsubscribe,
          track: message.track,
          username: caller.username,
          build: (messageId, acceptedAt) => messageToSend(message, messageId, acceptedAt),
        },
        caller,
      );
      await emails.accept(plan);
      return `2.0.0 Ok: queued as ${plan.emails[0]!.id}`;
    },
  };
}

export type SubmissionService = ReturnType<typeof createSubmissionService>;
