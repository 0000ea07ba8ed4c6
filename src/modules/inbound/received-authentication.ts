import { Worker } from 'node:worker_threads';
import {
  type ByteChunks,
  chunksOf,
  copiedForTransfer,
  firstBytes,
  HANDOVER_BYTES,
} from '../../lib/byte-chunks.ts';
import type { authenticate as mailauthAuthenticate } from 'mailauth';
import type { AuthRecordType, Dns } from '../../lib/dns.ts';
import { loadMailauth } from './mailauth.ts';
import { RECEIVED_LIMITS } from './received-parser.ts';

// Who a received message is from, as far as the network and the signatures prove it: SPF for the connecting
// address, its HELO and its MAIL FROM (RFC 7208), each DKIM signature (RFC 6376), DMARC for the From domain
// (RFC 7489) and the ARC chain (RFC 8617), all by mailauth's authenticate(), its DNS through the project's
// resolvers (DNS_SERVERS). The message is hostile and so are the domains it names: every lookup counts against
// the message's budget (AUTHENTICATION_LIMITS), the whole check against its time, and nothing it contains makes
// this throw: what could not be checked is `temperror`, as RFC 8601 reports a check that failed for a reason
// that may pass later (a DNS failure, the time running out), or `permerror` when it never will (a header past
// the cap). mailauth runs on the caller's event loop: it reads the message in chunks (a 10 MB message holds
// the loop 2 ms at most), but parses the header in one piece, hence the header cap below.

export interface ReceivedAuthentication {
  /** pass | fail | softfail | neutral | none | temperror | permerror, for the MAIL FROM domain (else HELO's). */
  spf: { result: string; domain: string | null };
  /** Each DKIM signature verified (see dkimSignatures), topmost first. */
  dkim: Array<{ domain: string; selector: string | null; result: string; aligned: boolean }>;
  /** Null when there is no single From domain to check (RFC 7489 §6.6.1). */
  dmarc: { result: string; policy: string | null; domain: string | null } | null;
  /** Null when the message has no ARC set. */
  arc: { result: string } | null;
  /** The Authentication-Results header value mailauth writes (for people), without the field name. */
  header: string;
}

export interface ReceivedEnvelope {
  /** The connecting client's address; null (a message not received over the network) makes SPF `none`. */
  remoteAddress: string | null;
  helo: string | null;
  /** The MAIL FROM address; '' for the null sender (bounces), when SPF checks the HELO name (RFC 7208 §2.4). */
  mailFrom: string;
}

export interface ReceivedAuthenticator {
  /** The message in its chunks (lib/byte-chunks.ts): handed to the check's thread, never joined here. */
  authenticate(raw: Buffer | ByteChunks, envelope: ReceivedEnvelope): Promise<ReceivedAuthentication>;
}

/**
 * What checking one message may cost. A legitimate message needs a dozen lookups or so: SPF's at most 10
 * (RFC 7208 §4.6.4), one key per DKIM signature (one or two), DMARC's record and its organizational domain's
 * (2–3), one key per ARC set.
 */
export const AUTHENTICATION_LIMITS = {
  /** The whole check, DNS waits included: past it, every result not yet known is temperror. */
  timeoutMs: 10_000,
  /**
   * DNS lookups for one message, all checks together: past it, a lookup fails as a DNS timeout would
   * (temperror). Room for SPF's 10, its void lookups, 10 DKIM keys, DMARC and ARC; not for the hundreds a
   * message of hundreds of signatures or ARC sets would otherwise ask for.
   */
  dnsLookups: 40,
  /** SPF's DNS-querying mechanisms (RFC 7208 §4.6.4: 10) and void lookups (§4.6.4: 2). */
  spfLookups: 10,
  spfVoidLookups: 2,
  /**
   * DKIM signatures verified at most (RFC 6376 §6.1: "Verifiers MAY limit the number of signatures they
   * attempt to verify"): the topmost (newest) ones; the rest are removed before verification and not
   * reported. Real mail carries one to three (the author's domain, its ESP's, a mailing list's). Each
   * signature costs a key lookup and a hash of the headers (and of the body, per canonicalization and l=), so
   * hundreds of them would otherwise mean hundreds of lookups.
   */
  dkimSignatures: 10,
  /**
   * The message's header block, in bytes, every line counted as 64 at least: the reader's cap
   * (RECEIVED_LIMITS.headerBytes), so that a message whose header the reader refuses is not checked either.
   * mailauth parses the header on the event loop, in one piece: measured, 1.7 M header lines (8.5 MB) held
   * it for 2.7 s and 700 MB, a From of 700 k addresses for 0.3 s. Past it, every result is permerror. Under
   * it, the worst found holds the loop ~0.1 s (8,000 header lines, 6,000 Received lines, a From of 40 k
   * addresses; a cold process).
   */
  headerBytes: RECEIVED_LIMITS.headerBytes,
} as const;

/** The least a header line counts for against headerBytes (mailparser's splitter counts the same). */
const HEADER_LINE_MIN_COST = 64;

/** The record types mailauth asks for (SPF: TXT, A, AAAA, MX, PTR; DKIM and ARC: TXT; DMARC: TXT, A, CNAME). */
const TYPES = new Set<string>(['A', 'AAAA', 'MX', 'TXT', 'PTR', 'CNAME']);

const dnsError = (code: string, message: string) => Object.assign(new Error(message), { code });

/** One DNS question, answered as node:dns answers it (errors carry its `code`). */
export type Lookup = (name: string, type: AuthRecordType) => Promise<unknown[]>;

/**
 * A resolver for one message: every lookup counts against its budget and its deadline, and none outlives the
 * deadline (a lookup still waiting then fails as a timeout; what mailauth makes of it is temperror).
 */
function messageResolver(lookup: Lookup, deadline: number, limit: number) {
  let count = 0;
  return async (name: string, type: string): Promise<unknown[]> => {
    const left = deadline - Date.now();
    if (left <= 0) throw dnsError('ETIMEOUT', `${type} ${name}: past the message's time for DNS`);
    if (++count > limit) throw dnsError('ETIMEOUT', `${type} ${name}: past ${limit} lookups for one message`);
    if (!TYPES.has(type)) throw dnsError('ENOTIMP', `${type} lookups are not made`);
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        lookup(name, type as AuthRecordType),
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(dnsError('ETIMEOUT', `${type} ${name}: past the message's time for DNS`)),
            left,
          );
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  };
}

/** Where the header ends: the offset of the blank line's start (the header's last line break included). */
function headerEnd(raw: Buffer): number {
  const crlf = raw.indexOf('\r\n\r\n');
  const lf = raw.indexOf('\n\n');
  if (crlf < 0 && lf < 0) return raw.length;
  if (crlf < 0) return lf + 1;
  if (lf < 0) return crlf + 2;
  return Math.min(crlf + 2, lf + 1);
}

/**
 * The message with no more than `keep` DKIM-Signature fields: the topmost are kept, the rest removed (their
 * bytes only; the rest of the message is unchanged). The same message when it has no more.
 */
export function withoutExtraSignatures(raw: Buffer, keep: number): Buffer {
  const end = headerEnd(raw);
  const head = raw.subarray(0, end).toString('latin1');
  const fields = head.split(/(?<=\n)(?![ \t])/);
  let seen = 0;
  const kept = fields.filter((field) => !/^dkim-signature\s*:/i.test(field) || ++seen <= keep);
  if (seen <= keep) return raw;
  return Buffer.concat([Buffer.from(kept.join(''), 'latin1'), raw.subarray(end)]);
}

/**
 * The domain (d=) and selector (s=) of the message's topmost `keep` DKIM-Signature fields, each with `result`:
 * what a check that could not verify them reports, so that a signed message is not shown as unsigned.
 */
function unverifiedSignatures(raw: Buffer, keep: number, result: string): ReceivedAuthentication['dkim'] {
  const head = raw.subarray(0, headerEnd(raw)).toString('latin1');
  const rows: ReceivedAuthentication['dkim'] = [];
  for (const field of head.split(/(?<=\n)(?![ \t])/)) {
    if (rows.length >= keep) break;
    if (!/^dkim-signature\s*:/i.test(field)) continue;
    // Tag values may be folded; d= and s= hold no whitespace of their own.
    const tags = new Map(
      field
        .slice(field.indexOf(':') + 1)
        .replace(/\s+/g, '')
        .split(';')
        .map(
          (tag) => [tag.slice(0, tag.indexOf('=')).toLowerCase(), tag.slice(tag.indexOf('=') + 1)] as const,
        ),
    );
    const domain = tags.get('d');
    if (domain)
      rows.push({ domain: domain.toLowerCase(), selector: tags.get('s') || null, result, aligned: false });
  }
  return rows;
}

/**
 * Whether the header block (to its first empty line) costs more than `limit` bytes, every line counted as
 * HEADER_LINE_MIN_COST at least. Stops reading as soon as it does.
 */
export function headerOverLimit(raw: Buffer, limit: number): boolean {
  let cost = 0;
  let at = 0;
  while (at < raw.length) {
    const end = raw.indexOf(0x0a, at);
    const next = end < 0 ? raw.length : end + 1;
    const length = next - at;
    // An empty line (LF or CRLF alone) ends the header.
    if (length === 1 || (length === 2 && raw[at] === 0x0d)) return false;
    cost += Math.max(HEADER_LINE_MIN_COST, length);
    if (cost > limit) return true;
    at = next;
  }
  return false;
}

/** mailauth's result, as far as it is read here (its types leave these loose). */
interface MailauthResult {
  dkim?: {
    results?: Array<{
      signingDomain?: string;
      selector?: string;
      status?: { result?: string; aligned?: string | false };
    }>;
  };
  spf?: { domain?: string; status?: { result?: string } } | false;
  dmarc?:
    { domain?: string; policy?: string; status?: { result?: string; header?: { from?: string } } } | false;
  arc?: { status?: { result?: string } } | false;
  headers?: string;
}

const TEMPERROR = 'temperror';
const PERMERROR = 'permerror';

/**
 * What a check that could not be made says: temperror when it may succeed later (its time ran out, mailauth
 * failed on the message), permerror when it never will (a header past the cap).
 */
function notChecked(
  result: typeof TEMPERROR | typeof PERMERROR,
  envelope: ReceivedEnvelope,
  hostname: string,
  why: string,
  dkim: ReceivedAuthentication['dkim'] = [],
): ReceivedAuthentication {
  const domain = domainOf(envelope.mailFrom) ?? envelope.helo ?? null;
  const comment = why.replace(/[()\r\n]+/g, ' ').slice(0, 200);
  return {
    spf: { result, domain },
    dkim,
    dmarc: { result, policy: null, domain: null },
    arc: null,
    header: `${hostname}; spf=${result} (${comment}); dkim=${result}; dmarc=${result}`,
  };
}

const domainOf = (address: string): string | null => {
  const at = address.lastIndexOf('@');
  const domain =
    at >= 0
      ? address
          .slice(at + 1)
          .trim()
          .toLowerCase()
      : '';
  return domain === '' ? null : domain;
};

/** The value of the Authentication-Results field in mailauth's headers, unfolded. */
function authenticationResults(headers: string | undefined): string {
  const match = /(?:^|\n)Authentication-Results:[ \t]*([\s\S]*?)(?=\r?\n(?![ \t])|$)/i.exec(headers ?? '');
  return (match?.[1] ?? '').replace(/\r?\n[ \t]+/g, ' ').trim();
}

function shape(result: MailauthResult): ReceivedAuthentication {
  const spf = result.spf || undefined;
  const dmarc = result.dmarc || undefined;
  const arc = result.arc || undefined;
  const arcResult = arc?.status?.result;
  return {
    spf: { result: spf?.status?.result ?? 'none', domain: spf?.domain ?? null },
    dkim: (result.dkim?.results ?? [])
      // A message with no signature gets one `none` row from mailauth, naming no domain: no signature.
      .filter((row) => typeof row.signingDomain === 'string' && row.signingDomain !== '')
      .map((row) => ({
        domain: row.signingDomain!.toLowerCase(),
        selector: row.selector ?? null,
        result: row.status?.result ?? 'none',
        aligned: Boolean(row.status?.aligned),
      })),
    dmarc: dmarc
      ? {
          result: dmarc.status?.result ?? 'none',
          policy: dmarc.policy ?? null,
          domain: dmarc.domain ?? dmarc.status?.header?.from ?? null,
        }
      : null,
    arc: arcResult && arcResult !== 'none' ? { result: arcResult } : null,
    header: authenticationResults(result.headers),
  };
}

/**
 * Checks one message where it is called (the authenticator's thread calls it; see createReceivedAuthenticator).
 * Never throws.
 */
export async function checkMessage(
  raw: Buffer,
  envelope: ReceivedEnvelope,
  options: { lookup: Lookup; hostname: string; timeoutMs: number },
): Promise<ReceivedAuthentication> {
  const { hostname, timeoutMs } = options;
  if (headerOverLimit(raw, AUTHENTICATION_LIMITS.headerBytes)) {
    return notChecked(
      PERMERROR,
      envelope,
      hostname,
      `a header block over ${AUTHENTICATION_LIMITS.headerBytes / 1024} KiB`,
    );
  }
  let timer: NodeJS.Timeout | undefined;
  try {
    const { authenticate } = await loadMailauth();
    const resolver = messageResolver(
      options.lookup,
      Date.now() + timeoutMs,
      AUTHENTICATION_LIMITS.dnsLookups,
    );
    const message = withoutExtraSignatures(raw, AUTHENTICATION_LIMITS.dkimSignatures);
    const result = await Promise.race([
      authenticate(message, {
        resolver: resolver as never,
        ip: envelope.remoteAddress ?? undefined,
        helo: envelope.helo ?? undefined,
        sender: envelope.mailFrom,
        mta: hostname,
        // Client, HELO and sender are the envelope's: the message's Received lines are the sender's word.
        trustReceived: false,
        disableBimi: true,
        maxResolveCount: AUTHENTICATION_LIMITS.spfLookups,
        maxVoidCount: AUTHENTICATION_LIMITS.spfVoidLookups,
        maxElapsedTime: timeoutMs,
      } as Parameters<typeof mailauthAuthenticate>[1]),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`not done within ${timeoutMs} ms`)), timeoutMs);
      }),
    ]);
    const shaped = shape(result as unknown as MailauthResult);
    // No connecting client (a message handed in another way): nothing for SPF to check.
    if (envelope.remoteAddress === null) shaped.spf = { result: 'none', domain: shaped.spf.domain };
    return shaped;
  } catch (error) {
    return notChecked(
      TEMPERROR,
      envelope,
      hostname,
      error instanceof Error ? error.message : String(error),
      unverifiedSignatures(raw, AUTHENTICATION_LIMITS.dkimSignatures, TEMPERROR),
    );
  } finally {
    clearTimeout(timer);
  }
}

/** What the main thread asks the authenticator's thread, and what it answers. */
export type ToAuthenticationThread =
  | {
      kind: 'check';
      id: number;
      /** The message, in pieces handed over (transferred). */
      raw: Uint8Array[];
      envelope: ReceivedEnvelope;
      hostname: string;
      timeoutMs: number;
    }
  | { kind: 'answer'; query: number; answer?: unknown[]; error?: { code: string; message: string } };
export type FromAuthenticationThread =
  | { kind: 'lookup'; query: number; name: string; type: AuthRecordType }
  | { kind: 'result'; id: number; result: ReceivedAuthentication };

/**
 * Past its own time, a check's thread has this long to answer (it starts on its first message, and answers
 * at its deadline by itself); one that does not is stuck in mailauth's CPU work and is ended.
 */
const THREAD_GRACE_MS = 3000;
/** The thread's heap (old generation), in MiB: a 512 KiB header takes mailauth ~50 MiB. */
const THREAD_MEMORY_MB = 128;

/**
 * Checks messages on a thread of its own, never on the caller's event loop (mailauth's parsing of a hostile
 * header can take a tenth of a second under the cap): the thread asks its DNS questions back through
 * `deps.dns` (DNS_SERVERS), one message's check answers within its time, and a thread that does not (or runs
 * out of heap) is ended, its checks temperror, and the next message starts another.
 */
export function createReceivedAuthenticator(deps: {
  dns: Dns;
  /** Our host name: the authserv-id of the Authentication-Results header (RFC 8601 §2.5). */
  hostname: string;
  /** The whole check's time (AUTHENTICATION_LIMITS.timeoutMs unless a test gives one). */
  timeoutMs?: number;
}): ReceivedAuthenticator & { close(): Promise<void> } {
  const timeoutMs = deps.timeoutMs ?? AUTHENTICATION_LIMITS.timeoutMs;
  interface Pending {
    envelope: ReceivedEnvelope;
    timer: NodeJS.Timeout;
    resolve(result: ReceivedAuthentication): void;
  }
  interface Thread {
    worker: Worker;
    pending: Map<number, Pending>;
  }
  let thread: Thread | undefined;
  let nextId = 1;

  function start(): Thread {
    const worker = new Worker(new URL('./received-authentication-worker.ts', import.meta.url), {
      resourceLimits: { maxOldGenerationSizeMb: THREAD_MEMORY_MB, maxYoungGenerationSizeMb: 16 },
    });
    worker.unref();
    const current: Thread = { worker, pending: new Map() };
    const post = (message: ToAuthenticationThread) => worker.postMessage(message);
    worker.on('message', (message: FromAuthenticationThread) => {
      if (message.kind === 'lookup') {
        deps.dns.resolve(message.name, message.type).then(
          (answer) => post({ kind: 'answer', query: message.query, answer }),
          (error: unknown) =>
            post({
              kind: 'answer',
              query: message.query,
              error: {
                code: String((error as { code?: unknown }).code ?? 'ESERVFAIL'),
                message: error instanceof Error ? error.message : String(error),
              },
            }),
        );
        return;
      }
      const pending = current.pending.get(message.id);
      if (!pending) return;
      current.pending.delete(message.id);
      clearTimeout(pending.timer);
      if (current.pending.size === 0) worker.unref();
      pending.resolve(message.result);
    });
    const lost = (why: string) => {
      if (thread === current) thread = undefined;
      for (const pending of current.pending.values()) {
        clearTimeout(pending.timer);
        pending.resolve(notChecked(TEMPERROR, pending.envelope, deps.hostname, why));
      }
      current.pending.clear();
    };
    worker.on('error', (error) => lost(`the check's thread failed: ${error.message}`));
    worker.on('exit', (code) => lost(`the check's thread exited with code ${code}`));
    return current;
  }

  return {
    async authenticate(bytes, envelope) {
      const raw = chunksOf(bytes);
      // The header is all that is read here: it ends within the cap's bytes, or it is over the cap (each
      // line costs at least its bytes).
      const head = firstBytes(raw, AUTHENTICATION_LIMITS.headerBytes + 2);
      // Checked here too, so that a message past the cap is not even copied to the thread.
      if (headerOverLimit(head, AUTHENTICATION_LIMITS.headerBytes)) {
        return notChecked(
          PERMERROR,
          envelope,
          deps.hostname,
          `a header block over ${AUTHENTICATION_LIMITS.headerBytes / 1024} KiB`,
        );
      }
      const transfer: ArrayBuffer[] = [];
      const pieces = await copiedForTransfer(raw, HANDOVER_BYTES, transfer);
      const current = (thread ??= start());
      const id = nextId++;
      return new Promise((resolve) => {
        const timer = setTimeout(() => {
          // Stuck past its time and the grace: only ending the thread stops it; its other checks end too.
          current.pending.delete(id);
          resolve(
            notChecked(
              TEMPERROR,
              envelope,
              deps.hostname,
              `not done within ${timeoutMs} ms`,
              unverifiedSignatures(head, AUTHENTICATION_LIMITS.dkimSignatures, TEMPERROR),
            ),
          );
          if (thread === current) thread = undefined;
          void current.worker.terminate();
        }, timeoutMs + THREAD_GRACE_MS);
        current.pending.set(id, { envelope, timer, resolve });
        current.worker.ref();
        current.worker.postMessage(
          {
            kind: 'check',
            id,
            raw: pieces,
            envelope,
            hostname: deps.hostname,
            timeoutMs,
          } satisfies ToAuthenticationThread,
          transfer,
        );
      });
    },
    async close() {
      const current = thread;
      thread = undefined;
      if (current) await current.worker.terminate();
    },
  };
}
