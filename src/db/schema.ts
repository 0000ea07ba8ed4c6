import type { ColumnType, Selectable } from 'kysely';

// Timestamps are stored as ISO 8601 UTC strings with milliseconds on both engines: they compare and sort
// correctly as text, and the API returns them as stored. Arrays and objects are stored as JSON text.
// Booleans are real booleans on PostgreSQL and 0/1 on SQLite; repositories read them with Boolean().

/** What an API key may call (src/http/auth.ts has the rule). */
export type KeyPermission = 'full_access' | 'sending_access' | 'read_only';

type Bool = ColumnType<boolean | number, boolean, boolean>;

export interface ProjectsTable {
  id: string;
  name: string;
  is_default: Bool;
  created_at: string;
}

export interface ApiKeysTable {
  id: string;
  project_id: string;
  name: string | null;
  key_hash: string;
  key_prefix: string;
  created_at: string;
  revoked_at: string | null;
  /** `full_access`, `sending_access` or `read_only` (migration 0026). */
  permission: ColumnType<KeyPermission, KeyPermission | undefined, KeyPermission>;
  /** A sending key's one domain (no foreign key: a deleted domain must not widen the key). */
  domain_id: ColumnType<string | null, string | null | undefined, string | null>;
}

export interface WebhooksTable {
  id: string;
  project_id: string;
  url: string;
  enabled: Bool;
  events: string;
  secret_sealed: string | null;
  created_at: string;
  updated_at: string;
  /** Why the service disabled the webhook (410, days of failures); null otherwise. */
  disabled_reason: ColumnType<string | null, string | null | undefined, string | null>;
  last_success_at: ColumnType<string | null, string | null | undefined, string | null>;
  /** Time of the first failed attempt since the last success; the 5-day disable rule counts from it. */
  failing_since: ColumnType<string | null, string | null | undefined, string | null>;
  /** The sealed secret a PATCH replaced: deliveries are signed with it too until previous_secret_expires_at. */
  previous_secret_sealed: ColumnType<string | null, string | null | undefined, string | null>;
  previous_secret_expires_at: ColumnType<string | null, string | null | undefined, string | null>;
  /** The payload format: `postwire` or `resend`. */
  format: ColumnType<string, string | undefined, string>;
}

export interface TemplatesTable {
  id: string;
  project_id: string;
  name: string;
  alias: string | null;
  subject: string | null;
  html: string | null;
  text: string | null;
  variables: string;
  created_at: string;
  updated_at: string;
  published_at: string | null;
  published_version: number | null;
}

export interface TemplateVersionsTable {
  template_id: string;
  version: number;
  project_id: string;
  name: string;
  subject: string | null;
  html: string | null;
  text: string | null;
  variables: string;
  published_at: string;
}

export interface IdempotencyKeysTable {
  project_id: string;
  key: string;
  request_hash: string;
  status_code: number | null;
  response_body: string | null;
  created_at: string;
}

export interface EventsTable {
  id: string;
  project_id: string;
  type: string;
  /** The event's `data` object as JSON text, sent to receivers as stored. */
  data: string;
  created_at: string;
  /** The email the event is about (its timeline is read from here); null for other events. */
  email_id: ColumnType<string | null, string | null | undefined, string | null>;
}

export type DeliveryStatus = 'pending' | 'succeeded' | 'failed';

// One row per (event, webhook): the outbox job and the delivery log the API shows.
export interface DeliveriesTable {
  id: string;
  project_id: string;
  event_id: string;
  webhook_id: string;
  status: DeliveryStatus;
  /** Attempts in the current run of the retry schedule (recovery starts a new run); the log has them all. */
  attempts: number;
  /** When the next attempt is due; meaningless once the delivery is no longer pending. */
  next_attempt_at: string;
  /** A worker's lease on the row: while in the future, no other worker claims it. */
  locked_until: string | null;
  locked_by: string | null;
  last_attempt_at: string | null;
  last_status_code: number | null;
  last_error: string | null;
  created_at: string;
  updated_at: string;
  completed_at: string | null;
  /**
   * The latest attempt, kept in the row (0020): its id and what its delivery_attempts row would hold besides
   * last_attempt_at and last_status_code. Null before the first attempt (and on rows from before 0020).
   * last_error is the delivery's, which an outcome without an attempt (the webhook disabled) also sets.
   */
  last_attempt_id: string | null;
  last_duration_ms: number | null;
  last_attempt_error: string | null;
  last_response_excerpt: string | null;
}

export interface DeliveryAttemptsTable {
  id: string;
  delivery_id: string;
  project_id: string;
  webhook_id: string;
  event_id: string;
  attempted_at: string;
  status_code: number | null;
  duration_ms: number;
  error: string | null;
  /** The first 4 KiB of the response body, as text. */
  response_excerpt: string | null;
}

// Sending (0003_emails). An email is stored with its recipients in one transaction before the API answers
// 202; each recipient row is also the sending job (claimed with a lease, like a delivery).

/** Where a recipient stands: waiting (`queued`, `delayed`), or how it ended. */
export const RECIPIENT_STATUSES = [
  'queued',
  'delayed',
  'sent',
  'delivered',
  'bounced',
  'failed',
  'complained',
  'cancelled',
  'suppressed',
] as const;
export type RecipientStatus = (typeof RECIPIENT_STATUSES)[number];

/** Where an email as a whole stands: its recipients' statuses summed up (emails/status.ts). */
export const EMAIL_STATUSES = ['scheduled', ...RECIPIENT_STATUSES, 'mixed'] as const;
export type EmailStatus = (typeof EMAIL_STATUSES)[number];

export interface EmailsTable {
  id: string;
  project_id: string;
  /** As accepted (`Name <a@b.c>` or `a@b.c`), normalized. */
  from_address: string;
  /** JSON arrays of addresses as accepted. */
  to_addresses: string;
  cc_addresses: string;
  bcc_addresses: string;
  reply_to: string;
  /** The subject and bodies as sent: a template is rendered when the email is accepted. */
  subject: string;
  html: string | null;
  text: string | null;
  /** JSON object of extra header name → value. */
  headers: string;
  /** JSON object of tag name → value. */
  tags: string;
  template_id: string | null;
  template_version: number | null;
  /** The RFC 5322 Message-ID, made when the email is accepted, the same on every attempt. */
  message_id: string;
  /** The DKIM `d=` it is signed with (a verified domain of the project, or DKIM_DOMAIN); null: unsigned. */
  dkim_domain: ColumnType<string | null, string | null | undefined, string | null>;
  /** The domain of its envelope sender (a verified return path, BOUNCE_DOMAIN, or the From domain). */
  return_path_domain: ColumnType<string | null, string | null | undefined, string | null>;
  status: EmailStatus;
  recipient_count: number;
  scheduled_at: string | null;
  created_at: string;
  updated_at: string;
  /** Where it came from: the HTTP API, or SMTP submission (its message then in email_submissions). */
  source: ColumnType<EmailSource, EmailSource | undefined, EmailSource>;
  /** The username an SMTP client gave in AUTH (free text, shown with the email). */
  smtp_username: ColumnType<string | null, string | null | undefined, string | null>;
  /** A broadcast's copy: the broadcast (`bc_…`) and the contact it went to; null for any other email. */
  broadcast_id: ColumnType<string | null, string | null | undefined, string | null>;
  contact_id: ColumnType<string | null, string | null | undefined, string | null>;
}

export type EmailSource = 'api' | 'smtp';

/** The message an SMTP client submitted, as it is sent (written by the emails repository with the email). */
export interface EmailSubmissionsTable {
  email_id: string;
  project_id: string;
  /** Its Message-ID (the client's, or the one added): unique per project, so a retried submission is one email. */
  message_id: string;
  /** The message when it is small; empty when it is kept in pieces. */
  raw: Uint8Array;
  /** The owner of its pieces in message_pieces (a large message); null: the message is in `raw`. */
  pieces_key: ColumnType<string | null, string | null | undefined, string | null>;
  created_at: string;
}

/** Sequence numbers are bigint: PostgreSQL hands them back as strings. */
type Seq = ColumnType<string | number | null, number | null | undefined, number | null>;

export interface EmailRecipientsTable {
  id: string;
  email_id: string;
  project_id: string;
  /** Order among the email's recipients (to, then cc, then bcc). */
  position: number;
  type: 'to' | 'cc' | 'bcc';
  /** The bare address (`a@b.c`) the SMTP envelope uses. */
  address: string;
  /** The recipient's domain, lowercased ASCII: the MX to deliver to and the per-host concurrency key. */
  host: string;
  status: RecipientStatus;
  attempts: number;
  /**
   * Queue position while due (fair across projects, see fair-queue.repo.ts); null while waiting or when done.
   * Workers claim the lowest first.
   */
  ready_seq: Seq;
  /** While waiting (scheduled, or a retry): when it becomes due. Null when due or done. */
  wait_until: string | null;
  /** When the next attempt is (or was) due, for people; null once done. */
  next_attempt_at: string | null;
  locked_until: string | null;
  locked_by: string | null;
  last_attempt_at: string | null;
  /** The server's reply to the last attempt, or why there was none. */
  last_response: string | null;
  last_response_code: number | null;
  created_at: string;
  updated_at: string;
  completed_at: string | null;
  /** When a report said delivery downstream is delayed; cleared when a later report settles it. */
  delay_reported_at: ColumnType<string | null, string | null | undefined, string | null>;
  /**
   * Why it waits when that is not a retry: `warmup` (its sending domain's day's allowance is used) or
   * `destination` (its destination asked to slow down); null otherwise. Set with each attempt's outcome.
   */
  wait_reason: ColumnType<string | null, string | null | undefined, string | null>;
  /**
   * The recipient's domain when it was accepted for direct delivery (each destination a lane whose look
   * probes its rows by this index, sending.claims.ts), else null: relay and capture write no index entry.
   */
  paced_host: ColumnType<string | null, string | null | undefined, string | null>;
}

/** A file sent with an email (written by the emails repository with the email). */
export interface EmailAttachmentsTable {
  email_id: string;
  /** Order among the email's attachments. */
  position: number;
  project_id: string;
  filename: string;
  content_type: string | null;
  /** Set for an inline attachment (`cid:` in the html). */
  content_id: string | null;
  size: number;
  /** The file; empty when it is kept in pieces. */
  content: Uint8Array;
  /** The file's pieces in message_pieces (a file larger than one piece); null: it is in `content`. */
  pieces_key: ColumnType<string | null, string | null | undefined, string | null>;
}

/** The MIME of an email kept by the capture transport instead of sending it. */
export interface EmailRawTable {
  email_id: string;
  project_id: string;
  /** The MIME when it is small; empty when it is kept in pieces. */
  raw: string;
  /** The owner of its pieces in message_pieces (a large message); null: the MIME is in `raw`. */
  pieces_key: ColumnType<string | null, string | null | undefined, string | null>;
  created_at: string;
}

/**
 * A large message's bytes, a piece per row (written and read by src/db/message-pieces.ts for the tables that
 * own them): a statement over one piece takes milliseconds, where one over 40 MiB holds the event loop.
 */
export interface MessagePiecesTable {
  /** `<kind>:<id>`, named by the owning row's `pieces_key`. */
  owner: string;
  /** The piece's place, from 0. */
  seq: number;
  bytes: Uint8Array;
}

/** Recipients accepted per project and UTC day, spread over a few rows so concurrent sends rarely wait on one. */
export interface SendQuotaTable {
  project_id: string;
  /** The UTC day, YYYY-MM-DD. */
  day: string;
  shard: number;
  used: number;
}

export type SuppressionReason = 'hard_bounce' | 'complaint' | 'unsubscribe' | 'manual';

/** An address a project does not send to any more (written by src/modules/suppressions). */
export interface SuppressionsTable {
  id: string;
  project_id: string;
  /** Lowercased: addresses match case-insensitively. */
  address: string;
  reason: SuppressionReason;
  /** The email whose bounce or complaint caused it; null for manual entries. */
  email_id: string | null;
  /** What caused it: the server's reply, the report's diagnostic. */
  detail: string | null;
  created_at: string;
}

/** A running queue worker and when it last said it was alive (written by src/queue/heartbeats.repo.ts). */
export interface QueueWorkersTable {
  /** The worker's id, as in the queue tables' `locked_by`. */
  id: string;
  /** Its queue's channel name (`postwire_deliveries`, `postwire_sending`). */
  queue: string;
  heartbeat_at: string;
}

/** How an inbound message was read: which report it was, and what came of it. */
export const INBOUND_STATUSES = [
  'pending',
  'applied',
  'no_change',
  'unmatched',
  'unverified',
  'ignored',
  'unreadable',
  'received',
] as const;
export type InboundStatus = (typeof INBOUND_STATUSES)[number];
export type InboundKind =
  | 'delivery_status'
  | 'feedback'
  | 'auto_reply'
  | 'unsubscribe'
  | 'dmarc_aggregate'
  | 'unreadable'
  | 'received';

/** A record of a DMARC aggregate report (written by src/modules/dmarc/dmarc.repo.ts). */
export interface DmarcRecordsTable {
  id: string;
  project_id: string;
  domain_id: string;
  /** The receiver that reported (`org_name`) and its report's id: a report is stored once. */
  reporter_org: string;
  report_id: string;
  /** The record's place in its report. */
  row_index: number;
  /** The report's period. */
  begin_at: string;
  end_at: string;
  source_ip: string;
  message_count: number;
  disposition: 'none' | 'quarantine' | 'reject';
  /** DKIM and SPF as DMARC evaluated them (aligned with the From domain). */
  dkim: 'pass' | 'fail';
  spf: 'pass' | 'fail';
  header_from: string;
}

/** An API request a key made (written by src/modules/logs, in batches after the answers). */
export interface ApiLogsTable {
  /** `log_…`, made when the log is written. */
  id: string;
  project_id: string;
  api_key_id: string;
  method: string;
  /** Without the query string. */
  path: string;
  status: number;
  duration_us: number;
  user_agent: string | null;
  /** Excerpts (JSON text), secrets redacted: src/modules/logs/log-excerpt.ts. */
  request_body: string | null;
  /** Null when the log names a shared answer instead (`response_answer_id`), or when it had no JSON answer. */
  response_body: string | null;
  created_at: string;
  /** The answer several logs share (api_log_answers), when this log's is one. */
  response_answer_id: string | null;
}

/** An answer shared by API logs of one project (src/modules/logs), stored once; migration 0043. */
export interface ApiLogAnswersTable {
  /** A digest of the project and the answer's excerpt. */
  id: string;
  project_id: string;
  /** The excerpt, as `api_logs.response_body` would hold it. */
  body: string;
  /** When a batch last named it: the pruner leaves it for a while after. */
  used_at: string;
}

/**
 * What the sending workers share of a destination, per sending source (written by
 * src/modules/destinations/destinations.repo.ts, on a change and at most once a second per destination).
 */
export interface DestinationsTable {
  source: string;
  /** The provider's name (`google`), or the destination's MX hosts sorted and joined with commas. */
  key: string;
  provider: string | null;
  mx_hosts: string;
  /** Messages a minute it takes now (adaptive); 0: no limit. */
  rate: number;
  /** Connections at once it takes now (adaptive). */
  connections: number;
  suspended_until: string | null;
  backoff_ms: number;
  last_deferral: string | null;
  last_deferral_at: string | null;
  deferrals: number;
  suspensions: number;
  updated_at: string;
}

/** Which destination a recipient domain's MX hosts roll up to (written by destinations.repo.ts). */
export interface DestinationDomainsTable {
  domain: string;
  destination: string;
  updated_at: string;
}

/** An operator's override of destinations' limits, set through the API (written by destinations.repo.ts). */
export interface DestinationOverridesTable {
  /** `*.example.net`, `mx.example.net`, a recipient domain, or a provider's name (lowercase). */
  pattern: string;
  /** Null: the default (the table's, or DESTINATION_LIMITS's); 0 (but connections): no limit. */
  connections: number | null;
  messages_per_connection: number | null;
  per_minute: number | null;
  per_hour: number | null;
  created_at: string;
  updated_at: string;
}

/** A sending domain's warm-up (written by src/modules/destinations/warmups.repo.ts). */
export interface WarmupsTable {
  domain_id: string;
  project_id: string;
  /** The domain's name, for matching an email's From domain without reading `domains`. */
  domain_name: string;
  enabled: Bool;
  /** JSON array of daily allowances per destination, day 1 first; null: WARMUP_SCHEDULE's. */
  schedule: string | null;
  /** Day 1 is the UTC day of this instant. */
  started_at: string;
  created_at: string;
  updated_at: string;
}

/** What a destination took of a warming domain's day (written by warmups.repo.ts, a block at a time). */
/** A warming source IP's count per large-provider destination and day (DIRECT_SOURCE_IPS). */
export interface SourceWarmupCountsTable {
  source: string;
  destination: string;
  /** The UTC day, YYYY-MM-DD. */
  day: string;
  used: number;
  last_grant: number;
}

export interface WarmupCountsTable {
  source: string;
  domain_id: string;
  destination: string;
  /** The UTC day, YYYY-MM-DD. */
  day: string;
  used: number;
  /** How much the last take got: the take's answer (RETURNING sees only the row after it). */
  last_grant: number;
}

/** A message received by the inbound SMTP listener (written by src/modules/inbound/inbound.repo.ts). */
export interface InboundMessagesTable {
  id: string;
  received_at: string;
  /** The envelope sender (MAIL FROM); empty for the null sender `<>` that reports use. */
  mail_from: string;
  /** JSON array of the envelope recipients (RCPT TO): our return paths. */
  rcpt_to: string;
  remote_address: string | null;
  size: number;
  status: InboundStatus;
  kind: InboundKind | null;
  /** How it was read, or why it matched nothing or could not be read. */
  detail: string | null;
  subject: string | null;
  /** The project, email and recipient address the report was matched to; null while unmatched. */
  project_id: string | null;
  email_id: string | null;
  recipient: string | null;
  attempts: ColumnType<number, number | undefined, number>;
  locked_until: string | null;
  locked_by: string | null;
  processed_at: string | null;
  /** The name the client gave in HELO/EHLO (SPF checks it). */
  helo: ColumnType<string | null, string | null | undefined, string | null>;
  /** JSON: each routed recipient's route, as the listener chose it at RCPT (null: a report). */
  routing: ColumnType<string | null, string | null | undefined, string | null>;
  /** JSON: spamd's verdict at DATA (SPAMD_URL), or null. */
  spam: ColumnType<string | null, string | null | undefined, string | null>;
}

export const ROUTE_ACTIONS = ['webhook', 'store', 'reject'] as const;
export type RouteAction = (typeof ROUTE_ACTIONS)[number];

/** A project's inbound route (written by src/modules/inbound-routes/inbound-routes.repo.ts). */
export interface InboundRoutesTable {
  id: string;
  project_id: string;
  /** The domain part of its match, lowercase ASCII. */
  domain: string;
  /** The local part of its match, lowercase, `*` matching any run of characters. */
  local_part: string;
  /** Lower first; ties go to the older route. */
  priority: number;
  action: RouteAction;
  /** The text of the 550 a `reject` route answers. */
  reject_message: string | null;
  /** A message spamd scores at or above this is refused at DATA (550). */
  spam_reject_score: number | null;
  enabled: Bool;
  created_at: string;
  updated_at: string;
}

export type ReceivedStatus = 'received' | 'unreadable';

/** One accepted recipient of a received message (written by src/modules/inbound/received.repo.ts). */
export interface ReceivedEmailsTable {
  id: string;
  project_id: string;
  /** The message as stored by the listener (inbound_messages.id); its bytes are in inbound_raw. */
  inbound_id: string;
  route_id: string | null;
  /** The envelope recipient, lowercased. */
  recipient: string;
  /** The `+tag` of the recipient's local part, when the route matched it without the tag. */
  mailbox_hash: string | null;
  received_at: string;
  mail_from: string;
  from_address: string | null;
  subject: string | null;
  message_id: string | null;
  /** The email of this project whose Message-ID its In-Reply-To or References names, and who it went to. */
  in_reply_to_email_id: string | null;
  in_reply_to_recipient: string | null;
  status: ReceivedStatus;
  size: number;
  attachment_count: number;
  /** JSON: the parsed message (addresses, dates, bodies, headers, attachments' metadata), or why it could not be read. */
  content: string;
  /** JSON: SPF, DKIM, DMARC and ARC as computed at receipt. */
  authentication: string | null;
  /** JSON: spamd's verdict, or null. */
  spam: string | null;
  created_at: string;
}

/**
 * A received message's bytes, apart from its queue row (written by src/modules/inbound/inbound.repo.ts): the
 * queue's claims and verdicts update that row, and would rewrite megabytes with it if they lived there.
 */
export interface InboundRawTable {
  /** The message's id (inbound_messages.id). */
  id: string;
  /** The message as received, byte for byte, when it is small; empty when it is kept in pieces. */
  raw: Uint8Array;
  /** The owner of its pieces in message_pieces (a large message); null: the message is in `raw`. */
  pieces_key: ColumnType<string | null, string | null | undefined, string | null>;
}

export type DomainStatus = 'pending' | 'verified' | 'failed';

/** A sending domain of a project (written by src/modules/domains/domains.repo.ts). */
export interface DomainsTable {
  id: string;
  project_id: string;
  /**
   * Lowercase ASCII (punycode), no trailing dot; unique within a project, and among verified domains (one
   * project holds a name at a time: the first to verify it, or the last to take it over by its challenge).
   */
  name: string;
  status: DomainStatus;
  /** The key that signs: its selector, public key (base64 SPKI DER) and sealed private key (PEM). */
  dkim_selector: string;
  dkim_public_key: string;
  dkim_private_key_sealed: string;
  /** A rotation's new key, pending until its record verifies; null when no rotation is under way. */
  next_dkim_selector: string | null;
  next_dkim_public_key: string | null;
  next_dkim_private_key_sealed: string | null;
  return_path_verified: Bool;
  /** JSON: what each record's last lookup found, by `<TYPE> <name>`. */
  checks: string | null;
  /** JSON: the compliance checks of the last check (compliance.ts); null before it, or without DNS. */
  compliance: string | null;
  last_checked_at: string | null;
  verified_at: string | null;
  /** When the background check looks at it next. */
  next_check_at: string;
  locked_by: string | null;
  locked_until: string | null;
  created_at: string;
  updated_at: string;
  /** The token of its challenge record (`_postwire-challenge.<name>`), needed to take a held name over. */
  challenge_token: string;
  /** Its owner asked to receive mail for it (inbound routes). */
  receiving: ColumnType<boolean | number, boolean | undefined, boolean>;
  /** Its MX points at INBOUND_MX_HOST, as the last check found: only then does the listener take its mail. */
  receiving_verified: ColumnType<boolean | number, boolean | undefined, boolean>;
  /** Its project reads DMARC aggregate reports mailed to `dmarc@<name>` (the inbound listener takes them). */
  dmarc_reports: ColumnType<boolean | number, boolean | undefined, boolean>;
}

/** What a send asked for: opens, clicks, one-click unsubscribe, and its html's links (src/modules/engagement). */
export interface EmailTrackingTable {
  email_id: string;
  project_id: string;
  opens: Bool;
  clicks: Bool;
  unsubscribe: Bool;
  /** JSON array of the tracked URLs, as written in the html; a click token names an index into it. */
  links: string;
  created_at: string;
}

type Counter = ColumnType<number | string, number | undefined, number>;

/** Opens, clicks and unsubscribes of one recipient, as counters (src/modules/engagement). */
export interface RecipientEngagementTable {
  recipient_id: string;
  project_id: string;
  email_id: string;
  open_count: Counter;
  human_open_count: Counter;
  automated_open_count: Counter;
  first_opened_at: string | null;
  last_opened_at: string | null;
  click_count: Counter;
  human_click_count: Counter;
  automated_click_count: Counter;
  first_clicked_at: string | null;
  last_clicked_at: ColumnType<string | null, string | null | undefined, string | null>;
  unsubscribe_count: Counter;
  unsubscribed_at: string | null;
}

/** A count per project, tag ('' for all), UTC day and metric (src/modules/stats). */
export interface EmailStatsDailyTable {
  project_id: string;
  tag: string;
  day: string;
  metric: string;
  count: ColumnType<number | string, number, number>;
}

/** One row per cached scope (src/db/validated-cache.ts); triggers give `version` a new value on each write. */
export interface CacheStampsTable {
  scope: string;
  version: ColumnType<number | string, number, number>;
}

/** One row: a value sealed with the database's encryption key at its first start (db/encryption-canary.repo.ts). */
export interface EncryptionCanaryTable {
  id: number;
  sealed: string;
  created_at: string;
}

/** A custom property a project declares for its contacts (written by src/modules/contacts). */
export interface ContactPropertiesTable {
  id: string;
  project_id: string;
  /** Unique per project: letters, digits and `_`. */
  key: string;
  type: 'string' | 'number';
  /** JSON text of a value of `type`, or null. */
  fallback_value: string | null;
  created_at: string;
  updated_at: string;
}

/** A person a project's broadcasts may go to (written by src/modules/contacts). */
export interface ContactsTable {
  id: string;
  project_id: string;
  /** Lowercased: unique per project in any case. */
  email: string;
  first_name: string | null;
  last_name: string | null;
  unsubscribed: Bool;
  /** JSON text: values keyed by their property's id (`cprop_…`). */
  properties: string;
  created_at: string;
  updated_at: string;
}

/** A named list of a project's contacts (written by src/modules/segments). */
export interface SegmentsTable {
  id: string;
  project_id: string;
  name: string;
  /** A filter segment's conditions (JSON text, segment-filter.ts); null: a list contacts are added to. */
  filter: ColumnType<string | null, string | null | undefined, string | null>;
  created_at: string;
  updated_at: string;
}

/** A contact in a segment (written by src/modules/segments). */
export interface SegmentContactsTable {
  segment_id: string;
  contact_id: string;
  created_at: string;
}

/** What a project's contacts subscribe to (written by src/modules/topics). */
export interface TopicsTable {
  id: string;
  project_id: string;
  name: string;
  description: string | null;
  default_subscription: 'opt_in' | 'opt_out';
  created_at: string;
  updated_at: string;
}

/** A contact's own choice for a topic; none means the topic's default (written by src/modules/topics). */
export interface ContactTopicsTable {
  contact_id: string;
  topic_id: string;
  subscription: 'opt_in' | 'opt_out';
  updated_at: string;
}

/** A CSV import of contacts: the job and its progress (written by src/modules/contacts, contact-imports.*). */
export interface ContactImportsTable {
  id: string;
  project_id: string;
  status: 'queued' | 'in_progress' | 'completed' | 'failed';
  /** JSON text: what the job does with each row (contact-imports.service.ts ImportPlan). */
  plan: string;
  bytes: number;
  rows_total: number;
  rows_read: ColumnType<number, number | undefined, number>;
  created_count: ColumnType<number, number | undefined, number>;
  updated_count: ColumnType<number, number | undefined, number>;
  skipped_count: ColumnType<number, number | undefined, number>;
  failed_count: ColumnType<number, number | undefined, number>;
  /** JSON text: `[{ row, reason }]`, the first failures. */
  errors: ColumnType<string, string | undefined, string>;
  /** Why the whole job failed, or null. */
  failure: string | null;
  created_at: string;
  started_at: string | null;
  completed_at: string | null;
  locked_by: string | null;
  locked_until: string | null;
}

/** The reputation breaker's state of a project ('' domain) or one of its sending domains (migration 0036). */
export interface ReputationStatesTable {
  project_id: string;
  domain: string;
  state: 'ok' | 'warning' | 'paused';
  reason: string | null;
  hard_bounce_rate: number | null;
  complaint_rate: number | null;
  changed_at: string;
  resumed_at: string | null;
  baseline_day: string | null;
  baseline_sent: ColumnType<number, number | undefined, number>;
  baseline_bounced: ColumnType<number, number | undefined, number>;
  baseline_bounced_hard: ColumnType<number, number | undefined, number>;
  baseline_complained: ColumnType<number, number | undefined, number>;
  pause_all_sending: Bool | null;
}

export type BroadcastStatus = 'draft' | 'scheduled' | 'sending' | 'sent' | 'canceled';

/** A message to a segment's contacts; its copies are emails (written by src/modules/broadcasts). */
export interface BroadcastsTable {
  id: string;
  project_id: string;
  name: string;
  /** Null while a draft has none (checked when it is sent). */
  from_address: string | null;
  /** JSON array of addresses. */
  reply_to: string;
  subject: string | null;
  preview_text: string | null;
  html: string | null;
  text: string | null;
  template_id: string | null;
  /** JSON object of template variables (a template's copies), or null. */
  template_variables: string | null;
  /** How its copies are personalized: Liquid (/v1) or Resend's triple braces (/resend). */
  personalization: ColumnType<'liquid' | 'resend', 'liquid' | 'resend' | undefined, 'liquid' | 'resend'>;
  segment_id: string | null;
  topic_id: string | null;
  status: BroadcastStatus;
  scheduled_at: string | null;
  /** When the fan-out began and ended. */
  started_at: string | null;
  sent_at: string | null;
  /** The fan-out's place: the last contact id of the segment it has handled (keyset), null before the first. */
  cursor: string | null;
  /** Copies made, and contacts excluded, so far (written with each batch). */
  copies: ColumnType<number, number | undefined, number>;
  excluded: ColumnType<number, number | undefined, number>;
  /** The key's one domain (api_keys.domain_id) that sent it, held to it for the From. */
  key_domain_id: string | null;
  /** Whether its copies track opens and clicks. */
  track_opens: Bool;
  track_clicks: Bool;
  locked_by: string | null;
  locked_until: string | null;
  created_at: string;
  updated_at: string;
}

/** A contact a broadcast did not go to, and why (written by src/modules/broadcasts). */
export interface BroadcastExclusionsTable {
  broadcast_id: string;
  contact_id: string;
  email: string;
  reason: 'unsubscribed' | 'topic_opt_out' | 'suppressed';
  created_at: string;
}

/** A custom event's name, declared with an optional payload schema (written by src/modules/custom-events). */
export interface CustomEventsTable {
  id: string;
  project_id: string;
  name: string;
  /** JSON object: payload field → `string` | `number` | `boolean` | `date`; null for any payload. */
  schema: string | null;
  created_at: string;
  updated_at: string;
}

/** A custom event sent for a contact (written by src/modules/custom-events). */
export interface CustomEventSendsTable {
  id: string;
  project_id: string;
  event_name: string;
  contact_id: string;
  /** JSON object. */
  payload: string;
  /** Automation runs it started, and waiting runs it resumed. */
  runs_started: ColumnType<number, number | undefined, number>;
  runs_resumed: ColumnType<number, number | undefined, number>;
  created_at: string;
}

export type AutomationStatus = 'enabled' | 'disabled';

/** An event-triggered sequence of steps (written by src/modules/automations). */
export interface AutomationsTable {
  id: string;
  project_id: string;
  name: string;
  status: AutomationStatus;
  /**
   * What starts it, as one key to find the automations a change starts: the trigger's event name, or
   * `@contact.created`, `@contact.added_to_segment:<segment id>`, `@contact.topic_subscribed:<topic id>`.
   */
  trigger_event: string;
  /** JSON: `{ steps, connections }` as the API takes them (the current version's). */
  graph: string;
  /** The current graph's version in automation_graphs; new runs follow it. */
  graph_version: ColumnType<number, number | undefined, number>;
  created_at: string;
  updated_at: string;
}

/** Each graph an automation had, never changed once written; runs follow the one they started with. */
export interface AutomationGraphsTable {
  automation_id: string;
  version: number;
  /** JSON: `{ steps, connections }`. */
  graph: string;
  created_at: string;
}

export type AutomationRunStatus = 'running' | 'waiting' | 'completed' | 'cancelled' | 'failed';

/** One contact's way through an automation; the runs' queue (written by src/modules/automations). */
export interface AutomationRunsTable {
  id: string;
  project_id: string;
  automation_id: string;
  contact_id: string;
  trigger_send_id: string | null;
  /** The automation's graph version the run follows (automation_graphs). */
  graph_version: ColumnType<number, number | undefined, number>;
  /** JSON object: the triggering event's payload. */
  trigger_payload: string;
  /** JSON object: the latest awaited event's payload, once a wait received one; null before. */
  event_payload: string | null;
  status: AutomationRunStatus;
  /** The key of the step the run is at (to run next, or waiting in). */
  current_step: string;
  /** JSON `{ event, payload }` when a wait was ended by its event; null otherwise. */
  resumed_by: string | null;
  /** While `waiting`: the event name waited for. */
  waiting_event: string | null;
  /** Steps recorded so far: every step's write is guarded by it, so a step is written once. */
  step_count: ColumnType<number, number | undefined, number>;
  /** When the run is next due (null: waiting for an event without a timeout, or finished). */
  due_at: string | null;
  /** Why it was cancelled or failed. */
  reason: string | null;
  locked_by: string | null;
  locked_until: string | null;
  started_at: string | null;
  completed_at: string | null;
  created_at: string;
  updated_at: string;
}

/** A step a run took: when, what it did, why a branch was taken (written by src/modules/automations). */
export interface AutomationRunStepsTable {
  run_id: string;
  seq: number;
  key: string;
  type: string;
  status: 'completed' | 'skipped' | 'waiting' | 'failed';
  /** JSON object, or null. */
  output: string | null;
  error: string | null;
  started_at: string | null;
  completed_at: string | null;
  created_at: string;
}

export interface Database {
  projects: ProjectsTable;
  api_keys: ApiKeysTable;
  webhooks: WebhooksTable;
  templates: TemplatesTable;
  template_versions: TemplateVersionsTable;
  idempotency_keys: IdempotencyKeysTable;
  events: EventsTable;
  deliveries: DeliveriesTable;
  delivery_attempts: DeliveryAttemptsTable;
  emails: EmailsTable;
  email_recipients: EmailRecipientsTable;
  email_raw: EmailRawTable;
  email_attachments: EmailAttachmentsTable;
  send_quota: SendQuotaTable;
  queue_workers: QueueWorkersTable;
  suppressions: SuppressionsTable;
  inbound_messages: InboundMessagesTable;
  inbound_raw: InboundRawTable;
  inbound_routes: InboundRoutesTable;
  received_emails: ReceivedEmailsTable;
  email_submissions: EmailSubmissionsTable;
  message_pieces: MessagePiecesTable;
  domains: DomainsTable;
  dmarc_records: DmarcRecordsTable;
  api_logs: ApiLogsTable;
  api_log_answers: ApiLogAnswersTable;
  destinations: DestinationsTable;
  destination_domains: DestinationDomainsTable;
  warmups: WarmupsTable;
  destination_overrides: DestinationOverridesTable;
  warmup_counts: WarmupCountsTable;
  source_warmup_counts: SourceWarmupCountsTable;
  reputation_states: ReputationStatesTable;
  email_tracking: EmailTrackingTable;
  recipient_engagement: RecipientEngagementTable;
  email_stats_daily: EmailStatsDailyTable;
  cache_stamps: CacheStampsTable;
  encryption_canary: EncryptionCanaryTable;
  contact_properties: ContactPropertiesTable;
  contacts: ContactsTable;
  segments: SegmentsTable;
  segment_contacts: SegmentContactsTable;
  topics: TopicsTable;
  contact_topics: ContactTopicsTable;
  contact_imports: ContactImportsTable;
  broadcasts: BroadcastsTable;
  broadcast_exclusions: BroadcastExclusionsTable;
  custom_events: CustomEventsTable;
  custom_event_sends: CustomEventSendsTable;
  automations: AutomationsTable;
  automation_graphs: AutomationGraphsTable;
  automation_runs: AutomationRunsTable;
  automation_run_steps: AutomationRunStepsTable;
}

export type Row<Table extends keyof Database> = Selectable<Database[Table]>;
