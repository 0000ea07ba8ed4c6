import type { Kysely } from 'kysely';
import type { Database } from '../../db/schema.ts';
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

/** A recipient's engagement as the email's view shows it. */
export interface RecipientEngagement {
  recipientId: string;
  openCount: number;
  firstOpenedAt: string | null;
  clickCount: number;
  firstClickedAt: string | null;
  unsubscribedAt: string | null;
}

/**
 * What the emails service needs of the engagement module's repository: keeping an accepted email's settings,
 * and reading them and its recipients' engagement back for its view. Stated here so that emails depends on
 * no engagement file (engagement applies its outcomes through emails/recipients.ts).
 */
export interface EngagementStore {
  /** Through `via`: the transaction the emails are written in. */
  insertSettings(rows: readonly TrackedEmail[], via: Kysely<Database>): Promise<void>;
  /** These two through `via` when given: the transaction an email's view is read back in. */
  settingsFor(emailIds: readonly string[], via?: Kysely<Database>): Promise<Map<string, TrackingSettings>>;
  forEmail(
    projectId: string,
    emailId: string,
    via?: Kysely<Database>,
  ): Promise<Map<string, RecipientEngagement>>;
}
