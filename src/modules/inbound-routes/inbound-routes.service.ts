import type { PageRequest } from '../../db/pagination.ts';
import type { RouteAction } from '../../db/schema.ts';
import type { Clock } from '../../lib/clock.ts';
import { invalidParam, notFound } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { DomainRepo } from '../domains/domains.repo.ts';
import {
  type InboundRouteRecord,
  type InboundRouteRepo,
  type RouteChanges,
  snakeCaseSettings,
} from './inbound-routes.repo.ts';
import type {
  CreateInboundRouteInput,
  InboundRouteView,
  UpdateInboundRouteInput,
} from './inbound-routes.schemas.ts';
import {
  formatRoutePattern,
  localPartMatches,
  parseRoutePattern,
  type RoutePattern,
  splitRecipient,
} from './route-match.ts';

export const toInboundRouteView = (record: InboundRouteRecord): InboundRouteView => ({
  object: 'inbound_route',
  id: record.id,
  match: formatRoutePattern(record),
  ...snakeCaseSettings(record),
});

/** What the listener does with a recipient at RCPT: take it for a project's route, or refuse it. */
export type RouteDecision =
  | {
      accept: true;
      projectId: string;
      routeId: string;
      action: Exclude<RouteAction, 'reject'>;
      mailboxHash: string | null;
      spamRejectScore: number | null;
    }
  | { accept: false; message: string };

/** What a `reject` route answers when it sets no text of its own. */
const DEFAULT_REJECT = 'This address does not accept mail';

export interface InboundRouteServiceDeps {
  repo: InboundRouteRepo;
  domains: Pick<DomainRepo, 'findByName'>;
  clock: Clock;
}

/**
 * A project's inbound routes: which of its addresses take mail, and what happens to it. Routes are plain rows
 * written on their own (no transaction to share): the listener reads them at each RCPT.
 */
export function createInboundRouteService({ repo, domains, clock }: InboundRouteServiceDeps) {
  async function load(projectId: string, id: string): Promise<InboundRouteRecord> {
    const record = isId('rte', id) ? await repo.find(projectId, id) : undefined;
    if (!record) throw notFound('inbound route', id);
    return record;
  }

  /** A match read, on a domain of this project (any status: receiving may be turned on later). */
  async function patternOf(projectId: string, match: string): Promise<RoutePattern> {
    const check = parseRoutePattern(match);
    if (!check.ok) throw invalidParam('match', `'${match}' ${check.reason}.`, 'invalid_match');
    if (!(await domains.findByName(projectId, check.pattern.domain))) {
      throw invalidParam(
        'match',
        `${check.pattern.domain} is not a domain of this project: add it (POST /v1/domains) and turn receiving on first.`,
        'domain_not_found',
      );
    }
    return check.pattern;
  }

  /** A reject message only with `reject`: any other action would never say it. */
  function checkRejectMessage(action: RouteAction, message: string | null | undefined) {
    if (action !== 'reject' && message !== undefined && message !== null) {
      throw invalidParam(
        'reject_message',
        `Only a 'reject' route answers with a message; this one is '${action}'.`,
      );
    }
  }

  return {
    /** Checks a new route, before any transaction (its domain is read); `create` then stores it. */
    async prepareCreate(projectId: string, input: CreateInboundRouteInput): Promise<InboundRouteRecord> {
      const pattern = await patternOf(projectId, input.match);
      checkRejectMessage(input.action, input.reject_message);
      const now = clock.now().toISOString();
      return {
        id: newId('rte'),
        projectId,
        domain: pattern.domain,
        localPart: pattern.localPart,
        priority: input.priority ?? 100,
        action: input.action,
        rejectMessage: input.action === 'reject' ? (input.reject_message ?? null) : null,
        spamRejectScore: input.spam_reject_score ?? null,
        enabled: input.enabled ?? true,
        createdAt: now,
        updatedAt: now,
      };
    },

    async create(transaction: Transaction, record: InboundRouteRecord): Promise<InboundRouteRecord> {
      await repo.insert(record, transaction);
      return record;
    },

    list: (projectId: string, page: PageRequest) => repo.list(projectId, page),

    get: load,

    async update(projectId: string, id: string, input: UpdateInboundRouteInput): Promise<InboundRouteRecord> {
      const current = await load(projectId, id);
      const changes: RouteChanges = {};
      if (input.match !== undefined) {
        const pattern = await patternOf(projectId, input.match);
        changes.domain = pattern.domain;
        changes.localPart = pattern.localPart;
      }
      const action = input.action ?? current.action;
      checkRejectMessage(action, input.reject_message);
      if (input.action !== undefined) changes.action = input.action;
      if (input.reject_message !== undefined) changes.rejectMessage = input.reject_message;
      // A route that stops rejecting forgets its message.
      if (action !== 'reject') changes.rejectMessage = null;
      if (input.priority !== undefined) changes.priority = input.priority;
      if (input.spam_reject_score !== undefined) changes.spamRejectScore = input.spam_reject_score;
      if (input.enabled !== undefined) changes.enabled = input.enabled;
      if (!(await repo.update(projectId, id, changes, clock.now().toISOString()))) {
        throw notFound('inbound route', id);
      }
      return load(projectId, id);
    },

    async remove(projectId: string, id: string) {
      if (!isId('rte', id) || !(await repo.delete(projectId, id))) throw notFound('inbound route', id);
      return { object: 'inbound_route' as const, id, deleted: true as const };
    },

    /**
     * The route a recipient takes (the first enabled one by priority whose match it is, among the routes of the
     * project that holds its domain verified for receiving), or why it is refused. Undefined: no route takes it
     * (the listener answers 550 5.1.1).
     */
    async resolve(address: string): Promise<RouteDecision | undefined> {
      const recipient = splitRecipient(address);
      if (!recipient) return undefined;
      const routes = await repo.receivingRoutes(recipient.domain);
      const route = routes.find((candidate) => localPartMatches(candidate.localPart, recipient.base));
      if (!route) return undefined;
      if (route.action === 'reject') return { accept: false, message: route.rejectMessage ?? DEFAULT_REJECT };
      return {
        accept: true,
        projectId: route.projectId,
        routeId: route.id,
        action: route.action,
        mailboxHash: recipient.mailboxHash,
        spamRejectScore: route.spamRejectScore,
      };
    },
  };
}

export type InboundRouteService = ReturnType<typeof createInboundRouteService>;
