import type { Clock } from '../../lib/clock.ts';
import type { SecretBox } from '../../lib/crypto.ts';
import { DomainError, invalidParam, notFound } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import { privateTargetReason, type Resolver } from '../../lib/network-policy.ts';
import type { Page, PageRequest } from '../../db/pagination.ts';
import { insertThenView } from '../../db/project-rows.ts';
import { createIdentityMemo } from '../../lib/memo.ts';
import { type EventKind, isEventKind } from '../event-kinds/event-kinds.ts';
import type { WebhookRecord, WebhookRepo } from './webhooks.repo.ts';
import type { CreateWebhookInput, UpdateWebhookInput, WebhookView } from './webhooks.schemas.ts';

export interface WebhookServiceDeps {
  repo: WebhookRepo;
  clock: Clock;
  secretBox: SecretBox;
  resolver: Resolver;
  allowPrivateUrls: boolean;
  /** After a PATCH replaces the secret, the old one keeps signing (next to the new one) this long. */
  secretRotationWindowMs: number;
}

/** A plain secret's fewest characters: a signature is only as strong as what it is keyed with. */
const MIN_PLAIN_SECRET_LENGTH = 16;
/** A whsec_ secret's bytes, as Standard Webhooks has them (24 to 64). */
const WHSEC_BYTES = { min: 24, max: 64 };
// C0 and C1 controls and DEL: a secret pasted with a line break would sign with it, and no receiver would.
const hasControlCharacter = (value: string): boolean =>
  [...value].some((char) => {
    const code = char.codePointAt(0)!;
    return code < 0x20 || (code >= 0x7f && code <= 0x9f);
  });

/** Refuses a signing secret too weak to sign with, or one no receiver would have typed the same way. */
function checkSecret(secret: string): void {
  if (secret.startsWith('whsec_')) {
    const encoded = secret.slice('whsec_'.length);
    const bytes = Buffer.from(encoded, 'base64');
    if (bytes.toString('base64').replace(/=+$/, '') !== encoded.replace(/=+$/, '') || bytes.length === 0) {
      throw invalidParam('secret', 'A secret that starts with whsec_ must continue with base64 bytes.');
    }
    if (bytes.length < WHSEC_BYTES.min || bytes.length > WHSEC_BYTES.max) {
      throw invalidParam(
        'secret',
        `A whsec_ secret must hold ${WHSEC_BYTES.min} to ${WHSEC_BYTES.max} bytes of base64; it holds ${bytes.length}.`,
      );
    }
    return;
  }
  if (hasControlCharacter(secret)) {
    throw invalidParam('secret', 'A secret must not contain control characters (line breaks, tabs, NUL).');
  }
  if ([...secret].length < MIN_PLAIN_SECRET_LENGTH) {
    throw invalidParam('secret', `A plain secret must be at least ${MIN_PLAIN_SECRET_LENGTH} characters.`);
  }
}

/** How long a project's failure streaks, once read, serve its webhooks' views (see `failingSince`). */
const STREAKS_FRESH_MS = 1000;
/** Projects whose streaks one process keeps; past this, the oldest goes. */
const STREAK_PROJECTS = 2_000;

/** The project's webhook, or the 404 that says it has none with this id. */
export async function loadWebhook(repo: WebhookRepo, projectId: string, id: string): Promise<WebhookRecord> {
  const record = isId('wh', id) ? await repo.find(projectId, id) : undefined;
  if (!record) throw notFound('webhook', id);
  return record;
}

export function toWebhookView(record: WebhookRecord): WebhookView {
  return {
    id: record.id,
    url: record.url,
    enabled: record.enabled,
    // Only kinds of the catalogue are ever stored (create and update check).
    events: record.events as EventKind[],
    format: record.format,
    created_at: record.createdAt,
    updated_at: record.updatedAt,
    has_secret: record.secretSealed !== null,
    disabled_reason: record.disabledReason,
    failing_since: null,
  };
}

/**
 * The views with each one's failure streak. Only a failing webhook gets a new view: while none fails (the
 * usual case) the views are those given, so a page served from memory stays the same page.
 */
function withStreaks<T extends WebhookView>(views: readonly T[], failing: Map<string, string>): readonly T[] {
  if (!views.some((view) => failing.has(view.id))) return views;
  return views.map((view) => {
    const since = failing.get(view.id);
    return since === undefined ? view : { ...view, failing_since: since };
  });
}

export function createWebhookService({
  repo,
  clock,
  secretBox,
  resolver,
  allowPrivateUrls,
  secretRotationWindowMs,
}: WebhookServiceDeps) {
  /** The views of each page the repository serves from memory. */
  const viewsOf = createIdentityMemo<Page<WebhookRecord>, Page<WebhookView>>();
  /**
   * Each project's failure streaks as last read, and when (performance.now()). They are the delivery worker's
   * bookkeeping, outside the cached records, so a read of the table is the only way to know them; kept for
   * STREAKS_FRESH_MS so that a list served from memory (GET /v1/webhooks, benchmarked) costs at most one such
   * read a second per project. A streak starts and ends on the worker's timescale (retries seconds to hours
   * apart, a disable after days): a second late is still the truth a person looks for.
   */
  const streaks = new Map<string, { readAt: number; failing: Promise<Map<string, string>> }>();
  function failingSince(projectId: string): Promise<Map<string, string>> {
    const now = performance.now();
    const kept = streaks.get(projectId);
    if (kept && now - kept.readAt < STREAKS_FRESH_MS) return kept.failing;
    const failing = repo.failingSince(projectId);
    streaks.delete(projectId);
    streaks.set(projectId, { readAt: now, failing });
    if (streaks.size > STREAK_PROJECTS) streaks.delete(streaks.keys().next().value!);
    failing.catch(() => streaks.delete(projectId));
    return failing;
  }
  async function checkUrl(raw: string): Promise<string> {
    let parsed: URL;
    try {
      parsed = new URL(raw);
    } catch {
      throw invalidParam('url', 'url must be an absolute URL such as https://example.com/webhooks.');
    }
    if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') {
      throw invalidParam('url', 'url must use https.');
    }
    if (!parsed.hostname) throw invalidParam('url', 'url must have a host.');
    // Stored, it would be echoed in every response and log line: credentials go in the signing secret or
    // in a token in the path, never in the URL. The message does not repeat them.
    if (parsed.username !== '' || parsed.password !== '') {
      throw invalidParam(
        'url',
        'url must not contain a user name or password (user:password@); the signing secret authenticates deliveries.',
      );
    }
    // Port 0 is no port: connecting to it reaches whatever the system picks, never the receiver.
    if (parsed.port === '0') throw invalidParam('url', 'url must not use port 0.');
    if (allowPrivateUrls) return parsed.toString();
    // Both refusals name the setting: on a laptop, a local receiver is the first webhook anyone tries.
    const allowLocally = '(local development), the operator sets POSTWIRE_ALLOW_PRIVATE_URLS=true.';
    if (parsed.protocol === 'http:') {
      throw invalidParam('url', `url must use https; to allow plain http ${allowLocally}`);
    }
    const reason = await privateTargetReason(parsed.hostname, resolver);
    if (reason) {
      throw invalidParam(
        'url',
        `url is not allowed: ${reason}, which webhooks may not reach; to allow it ${allowLocally}`,
        'url_not_allowed',
      );
    }
    return parsed.toString();
  }

  function checkEvents(events: string[]): string[] {
    events.forEach((kind, index) => {
      if (!isEventKind(kind)) {
        throw invalidParam(
          `events[${index}]`,
          `Unknown event kind '${kind}'; GET /v1/event-kinds lists them.`,
        );
      }
    });
    return [...new Set(events)];
  }

  function sealSecret(secret: string | null | undefined): string | null {
    if (secret === null || secret === undefined) return null;
    checkSecret(secret);
    return secretBox.seal(secret);
  }

  const load = (projectId: string, id: string) => loadWebhook(repo, projectId, id);

  /**
   * The secret fields after a PATCH sends `secret`. A new secret keeps the one it replaces signing until
   * the rotation window ends, so receivers can switch over without rejecting deliveries (Standard Webhooks
   * sends both signatures, space-separated); rotating again drops the older one at once. `null` removes both.
   */
  function rotateSecret(
    current: WebhookRecord,
    secret: string | null,
    now: number,
  ): Pick<WebhookRecord, 'secretSealed' | 'previousSecretSealed' | 'previousSecretExpiresAt'> {
    if (secret === null)
      return { secretSealed: null, previousSecretSealed: null, previousSecretExpiresAt: null };
    const sealed = sealSecret(secret);
    if (current.secretSealed === null) {
      return { secretSealed: sealed, previousSecretSealed: null, previousSecretExpiresAt: null };
    }
    let old: string | undefined;
    try {
      old = secretBox.open(current.secretSealed);
    } catch {
      // Sealed under another key: it could not sign anyway, so there is nothing to keep.
      return { secretSealed: sealed, previousSecretSealed: null, previousSecretExpiresAt: null };
    }
    // The same secret sent again is no rotation: the current one and any rotation in progress stay.
    if (old === secret) {
      return {
        secretSealed: current.secretSealed,
        previousSecretSealed: current.previousSecretSealed,
        previousSecretExpiresAt: current.previousSecretExpiresAt,
      };
    }
    return {
      secretSealed: sealed,
      previousSecretSealed: current.secretSealed,
      previousSecretExpiresAt: new Date(now + secretRotationWindowMs).toISOString(),
    };
  }

  return {
    /** Checks a new webhook (its URL's host is resolved: seconds, at worst) before any transaction. */
    async prepareCreate(projectId: string, input: CreateWebhookInput): Promise<WebhookRecord> {
      const url = await checkUrl(input.url);
      const events = checkEvents(input.events);
      const now = clock.now().toISOString();
      const record: WebhookRecord = {
        id: newId('wh'),
        projectId,
        url,
        enabled: input.enabled ?? true,
        events,
        secretSealed: sealSecret(input.secret),
        createdAt: now,
        updatedAt: now,
        disabledReason: null,
        previousSecretSealed: null,
        previousSecretExpiresAt: null,
        format: input.format ?? 'postwire',
      };
      return record;
    },

    create: insertThenView(repo, toWebhookView),

    async get(projectId: string, id: string): Promise<WebhookView> {
      const [record, failing] = await Promise.all([load(projectId, id), failingSince(projectId)]);
      return withStreaks([toWebhookView(record)], failing)[0]!;
    },

    /**
     * A page the repository serves again unchanged (from memory) gives the same, frozen, page of views while
     * none of them is failing.
     */
    async list(projectId: string, page: PageRequest): Promise<Page<WebhookView>> {
      const [result, failing] = await Promise.all([repo.list(projectId, page), failingSince(projectId)]);
      const views = viewsOf(result, () =>
        Object.freeze({
          items: Object.freeze(result.items.map(toWebhookView)) as WebhookView[],
          hasMore: result.hasMore,
        }),
      );
      const items = withStreaks(views.items, failing);
      return items === views.items ? views : { items: [...items], hasMore: views.hasMore };
    },

    async update(projectId: string, id: string, input: UpdateWebhookInput): Promise<WebhookView> {
      if (Object.keys(input).length === 0) {
        throw new DomainError(
          'validation',
          'parameter_missing',
          'Send at least one of url, events, enabled, format, secret.',
        );
      }
      const current = await load(projectId, id);
      const next: WebhookRecord = { ...current };
      if (input.url !== undefined) next.url = await checkUrl(input.url);
      if (input.events !== undefined) next.events = checkEvents(input.events);
      if (input.enabled !== undefined) next.enabled = input.enabled;
      if (input.format !== undefined) next.format = input.format;
      // Enabling clears why the service disabled it; disabling through the API gives no reason.
      const reenabled = input.enabled === true && (!current.enabled || current.disabledReason !== null);
      if (input.enabled === true) next.disabledReason = null;
      // updated_at moves on every change, even two within one millisecond, so clients can order them.
      const now = clock.now().getTime();
      if (input.secret !== undefined) Object.assign(next, rotateSecret(current, input.secret, now));
      next.updatedAt = new Date(Math.max(now, Date.parse(current.updatedAt) + 1)).toISOString();
      await repo.update(current, next, { reenabled });
      // Read back: what a concurrent writer (the worker disabling it) changed in other columns shows too, and
      // the streaks afresh (enabling it again ended its own).
      streaks.delete(projectId);
      const [record, failing] = await Promise.all([load(projectId, current.id), failingSince(projectId)]);
      return withStreaks([toWebhookView(record)], failing)[0]!;
    },

    async delete(projectId: string, id: string): Promise<{ id: string; deleted: true }> {
      const deleted = isId('wh', id) && (await repo.delete(projectId, id));
      if (!deleted) throw notFound('webhook', id);
      return { id, deleted: true };
    },
  };
}

export type WebhookService = ReturnType<typeof createWebhookService>;
