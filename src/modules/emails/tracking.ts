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
