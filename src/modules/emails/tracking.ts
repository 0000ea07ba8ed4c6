/**
 * What a send asked for (tracking, unsubscribe), as stored once per email: part of the email, so the emails
 * module states it and the engagement module, which serves its URLs, reads it.
 */
export interface TrackingSettings {
  opens: boolean;
  clicks: boolean;
  unsubscribe: boolean;
  /** The html's tracked URLs; a click token names an index into this list. */
  links: string[];
}

/** An accepted email's settings, to keep. */
export interface TrackedEmail {
  emailId: string;
  projectId: string;
  settings: TrackingSettings;
  createdAt: string;
}

/**
 * The settings to keep of the emails that asked for anything: what a send (src/modules/emails/send-store.ts)
 * and a broadcast's copies (src/modules/broadcasts/fan-out.ts) write with the emails, in their transaction.
 */
export const trackedEmails = (
  emails: ReadonlyArray<{
    id: string;
    projectId: string;
    createdAt: string;
    tracking?: TrackingSettings | undefined;
  }>,
): TrackedEmail[] =>
  emails.flatMap((email) =>
    email.tracking === undefined
      ? []
      : [
          {
            emailId: email.id,
            projectId: email.projectId,
            settings: email.tracking,
            createdAt: email.createdAt,
          },
        ],
  );

/** A recipient's engagement as the email's view shows it. */
export interface RecipientEngagement {
  recipientId: string;
  openCount: number;
  firstOpenedAt: string | null;
  clickCount: number;
  firstClickedAt: string | null;
  unsubscribedAt: string | null;
}
