import type { ByteChunks } from '../../lib/byte-chunks.ts';
import { QUEUE_CHANNELS } from '../../queue/notifier.ts';
import { createQueueWorker, withQueueDefaults } from '../../queue/runtime.ts';
import type { QueueWorker, QueueWorkerDeps } from '../../queue/runtime.ts';
import type { RecipientRepo } from '../emails/recipients.repo.ts';
import type { ReturnPath } from '../emails/return-path.ts';
import type { EventService } from '../events/events.service.ts';
import type { InboundRepo } from './inbound.repo.ts';
import { createInboundQueueSource, type InboundJob, type InboundOutcome } from './inbound.queue.ts';
import type { FeedbackLoops, ReportAuthenticator } from './report-authentication.ts';
import { createReportMatcher } from './report-matching.ts';
import { createReportReader, type ReportReaderOptions } from './report-reader.ts';
import type { AggregateReport } from '../dmarc/aggregate-xml.ts';
import type { StoredReport } from '../dmarc/dmarc.service.ts';
import { createDmarcReader } from './dmarc-reader.ts';
import { type MetricsRecorder, noMetrics } from '../metrics/instruments.ts';
import type { ReceivedAuthenticator } from './received-authentication.ts';
import { createReceivedIntake } from './received-intake.ts';
import type { ReceivedRepo } from './received.repo.ts';
import type { SuppressionRepo } from '../suppressions/suppressions.repo.ts';
import { createReceivedReader } from './received-reader.ts';

// Reads what the inbound listener stored, on the queue runtime like every other background job: a message
// is leased, read (the report parsed on a parse thread, its recipient found), and what it says is applied
// in one transaction with its events, its suppressions and the message's own verdict. A worker that dies
// mid-way leaves the message pending: another reads it again, and the recipient's status guards make that apply once.

export interface InboundWorkerDeps extends QueueWorkerDeps {
  /** The process's repositories: a message's bytes, the recipients reports are about, received emails. */
  repositories: {
    inbound: Pick<InboundRepo, 'raw'>;
    recipients: RecipientRepo;
    received: Pick<ReceivedRepo, 'insert'>;
    suppressions: Pick<SuppressionRepo, 'add'>;
  };
  events: Pick<EventService, 'emitIn'>;
  /** How reports to our return paths are recognised (BOUNCE_DOMAIN); without it only Message-IDs match. */
  returnPath: ReturnPath | undefined;
  /** Who signed a report matched by Message-ID, and which feedback loops report for which domains. */
  authenticator: ReportAuthenticator;
  feedbackLoops: FeedbackLoops;
  /** The fallback poll when no wake-up comes. */
  pollIntervalMs?: number;
  /**
   * List-Unsubscribe's `mailto:` (`unsubscribe+<token>@BOUNCE_DOMAIN`, the engagement module): true when the
   * address named a recipient, who is then unsubscribed (once, however often the mail comes).
   */
  unsubscribeByMail?: ((address: string) => Promise<boolean>) | undefined;
  /** The parse threads' settings (REPORT_PARSE_*); DEFAULTS.reportParsing when absent. */
  reportParsing?: ReportReaderOptions | undefined;
  /** SPF, DKIM, DMARC and ARC of received mail (DNS_SERVERS); absent, they are not computed. */
  receivedAuthenticator?: (ReceivedAuthenticator & { close(): Promise<void> }) | undefined;
  /**
   * DMARC aggregate reports: mail to `address` (dmarc@BOUNCE_DOMAIN) is read on the DMARC reader's threads
   * and stored for the domain holding the reported name (the dmarc module); mail to a verified domain's own
   * `dmarc@` address, when its project reads it (`readerOf`), for that project's domains only.
   */
  dmarcReports?:
    | {
        address?: string | undefined;
        readerOf?(address: string): Promise<{ projectId: string } | undefined>;
        store(report: AggregateReport, onlyFor?: string): Promise<StoredReport>;
      }
    | undefined;
  /** Counts the reports read, by verdict (/metrics); nothing is counted when absent. */
  metrics?: Pick<MetricsRecorder, 'inboundReportRead'> | undefined;
}

/**
 * A message is read at most this many times: a report about a recipient still being sent waits and is read
 * again, and a read that failed (the database away) is retried when its lease runs out; past it, it is
 * given up on, and says so.
 */
const MAX_READS = 30;
const CONCURRENCY = 4;
const ATTEMPT_TIMEOUT_MS = 30_000;

export function createInboundWorker(deps: InboundWorkerDeps): QueueWorker {
  const { clock } = deps;
  const { logger, workerId, pollIntervalMs, heartbeats, deadAfterMs } = withQueueDefaults(deps, {
    pollIntervalMs: deps.pollIntervalMs,
  });
  const { db, engine } = deps.database;
  const { inbound: repo, recipients, received } = deps.repositories;
  // Every stored message is hostile: it is read on the reader's threads, never on this event loop.
  const reader = createReportReader(deps.reportParsing);
  const receivedReader = createReceivedReader(deps.reportParsing);
  const dmarcReader = deps.dmarcReports ? createDmarcReader(deps.reportParsing) : undefined;
  const intake = createReceivedIntake({
    reader: receivedReader,
    authenticator: deps.receivedAuthenticator,
    recipients,
    received,
    clock,
    logger,
  });
  const matcher = createReportMatcher({
    recipients,
    returnPath: deps.returnPath,
    authenticator: deps.authenticator,
    feedbackLoops: deps.feedbackLoops,
  });

  const source = createInboundQueueSource({
    db,
    engine,
    clock,
    workerId,
    events: deps.events,
    recipients,
    suppressions: deps.repositories.suppressions,
    intake,
    metrics: deps.metrics ?? noMetrics,
  });

  /**
   * Whether a message is a DMARC report to read: mailed to dmarc@BOUNCE_DOMAIN (any project's domain), or to
   * the own address of a domain whose project reads it (that project's only).
   */
  async function dmarcRecipient(rcptTo: readonly string[]): Promise<{ projectId?: string } | undefined> {
    const dmarc = deps.dmarcReports!;
    if (dmarc.address !== undefined && rcptTo.includes(dmarc.address)) return {};
    for (const address of rcptTo) {
      if (!address.startsWith('dmarc@') || !dmarc.readerOf) continue;
      const reader = await dmarc.readerOf(address);
      if (reader) return reader;
    }
    return undefined;
  }

  /**
   * A message with routed recipients: its received emails, and, for any recipient that is one of our return
   * paths besides (a report sent to both), what the report says.
   */
  async function attemptReceived(job: InboundJob, raw: ByteChunks): Promise<InboundOutcome> {
    const received = await intake.read(job.message, raw);
    const subject = received[0]?.record.subject ?? null;
    const routed = new Set(job.message.routing.map((route) => route.address));
    const reportRecipients = job.message.rcptTo.filter((address) => !routed.has(address));
    const said = `received for ${received.map((write) => `${write.record.recipient} (${write.record.id})`).join(', ')}`;
    if (reportRecipients.length > 0) {
      const read = await reader.read(raw);
      const interpretation = await matcher.interpret({ ...job.message, rcptTo: reportRecipients, raw, read });
      if (!interpretation.early) {
        return { ...interpretation, detail: `${interpretation.detail}; ${said}`, received };
      }
    }
    const unreadable = received.find((write) => write.record.status === 'unreadable');
    return {
      kind: 'received',
      subject,
      status: 'received',
      detail: unreadable
        ? `${said}; its MIME could not be read: ${(unreadable.record.content as { reason: string }).reason}`
        : said,
      effects: [],
      received,
    };
  }

  async function attempt(job: InboundJob): Promise<InboundOutcome> {
    if (job.message.attempts > MAX_READS) {
      return {
        kind: 'unreadable',
        subject: null,
        status: 'unreadable',
        detail: `could not be read in ${MAX_READS} attempts; see the worker's log`,
        effects: [],
      };
    }
    // The bytes are read here, per job and outside any transaction, not with the claim: the claim's UPDATE
    // stays small, and only the messages being read (CONCURRENCY of them) are held in memory at once.
    const raw = await repo.raw(job.message.id);
    if (raw === undefined) {
      return {
        kind: 'unreadable',
        subject: null,
        status: 'unreadable',
        detail: 'its bytes are no longer stored',
        effects: [],
      };
    }
    if (job.message.routing.length > 0) return attemptReceived(job, raw);
    const dmarc = deps.dmarcReports;
    const dmarcFor = dmarc && dmarcReader ? await dmarcRecipient(job.message.rcptTo) : undefined;
    if (dmarc && dmarcReader && dmarcFor) {
      // Stored in a transaction of its own (like an unsubscribe): a second read writes no record twice.
      const read = await dmarcReader.read(raw);
      const stored =
        'report' in read
          ? await dmarc.store(read.report, dmarcFor.projectId)
          : { status: 'unreadable' as const, projectId: null, detail: `a DMARC report ${read.unreadable}` };
      return { kind: 'dmarc_aggregate', subject: null, effects: [], ...stored };
    }
    const read = await reader.read(raw);
    // A mail to List-Unsubscribe's mailto is no report: it unsubscribes (in a transaction of its own, which
    // a second read finds already done).
    const unsubscribeTo = job.message.rcptTo.find((address) => address.startsWith('unsubscribe+'));
    if (unsubscribeTo !== undefined && deps.unsubscribeByMail) {
      const done = await deps.unsubscribeByMail(unsubscribeTo);
      return {
        kind: 'unsubscribe',
        subject: read.subject,
        status: done ? 'applied' : 'unmatched',
        detail: done
          ? `a List-Unsubscribe mail to ${unsubscribeTo}: the recipient is unsubscribed`
          : `a List-Unsubscribe mail to ${unsubscribeTo}, which names no recipient`,
        effects: [],
      };
    }
    const interpretation = await matcher.interpret({ ...job.message, raw, read });
    if (interpretation.early && job.message.attempts >= MAX_READS) {
      return {
        ...interpretation,
        early: false,
        status: 'unmatched',
        detail: `its recipient was still being sent after ${MAX_READS} reads`,
      };
    }
    return interpretation;
  }

  return createQueueWorker({
    name: 'inbound worker',
    workerId,
    source,
    attempt,
    settings: {
      concurrency: CONCURRENCY,
      laneConcurrency: CONCURRENCY,
      laneCapacity: CONCURRENCY * 2,
      capacity: CONCURRENCY * 2,
      claimBatch: 1,
      attemptTimeoutMs: ATTEMPT_TIMEOUT_MS,
      leaseMs: 2 * ATTEMPT_TIMEOUT_MS + 2000,
      pollIntervalMs,
      stopGraceMs: 5000,
      outcomeWriteIntervalMs: 0,
      maxUnrecorded: CONCURRENCY * 2,
    },
    clock,
    logger,
    notifier: deps.notifier,
    database: deps.database,
    channel: QUEUE_CHANNELS.inbound,
    heartbeats,
    deadAfterMs,
    // The parse threads end with the worker, once the attempts that used them have finished.
    close: async () => {
      await Promise.all([
        reader.close(),
        receivedReader.close(),
        dmarcReader?.close(),
        deps.receivedAuthenticator?.close(),
      ]);
    },
  });
}
