import type { Kysely } from 'kysely';
import type { Config, DkimConfig, SenderDomainsPolicy } from '../../config.ts';
import type { Engine } from '../../db/connection.ts';
import type { Page, PageRequest } from '../../db/pagination.ts';
import type { Database, DomainStatus } from '../../db/schema.ts';
import { inTransaction, type Transaction } from '../../db/transaction.ts';
import type { Stamps } from '../../db/validated-cache.ts';
import type { Clock } from '../../lib/clock.ts';
import type { Dns } from '../../lib/dns.ts';
import { conflict, DomainError, invalidParam, notFound } from '../../lib/errors.ts';
import { randomToken, type SecretBox } from '../../lib/crypto.ts';
import { isId, newId } from '../../lib/ids.ts';
import type { EventService, NewEvent } from '../events/events.service.ts';
import { type DkimKeyPair, generateDkimKey } from './dkim-key.ts';
import { isReservedTestName, normalizeDomainName, selfAndParents } from './domain-name.ts';
import {
  createDomainRepo,
  type DomainCoverage,
  type DomainRecord,
  type DomainRepo,
  type NewDomain,
} from './domains.repo.ts';
import type {
  CreateDomainInput,
  DomainRecordViewType,
  DomainView,
  UpdateDomainInput,
} from './domains.schemas.ts';
import {
  evaluate,
  expectedRecords,
  lookUp,
  type RecordCheck,
  type RecordSettings,
  returnPathName,
} from './records.ts';

export interface DomainSettings {
  /** The return-path records (MX to INBOUND_MX_HOST, SPF) when per-recipient return paths are on. */
  returnPath?: RecordSettings['returnPath'];
  /** How often the background check looks at each domain again (DOMAIN_RECHECK). */
  recheckMs: number;
  /** SENDER_DOMAINS. */
  senderDomains: SenderDomainsPolicy;
  /** The global DKIM key (DKIM_*), signing what no verified domain of the project covers. */
  fallbackDkim?: DkimConfig | undefined;
  /** BOUNCE_DOMAIN: the envelope-sender domain of mail that has no verified return path of its own. */
  bounceDomain?: string | undefined;
  /** INBOUND_MX_HOST: the MX a receiving domain publishes; absent, no domain can receive. */
  receivingMxHost?: string | undefined;
  /** TEST_DOMAINS_WITHOUT_DNS (capture mode only): names under `.test`, `.example`, `.localhost` verify without DNS. */
  testNamesWithoutDns?: boolean;
}

/**
 * The sending-domain settings the configuration gives: return-path records only when per-recipient return
 * paths are on (BOUNCE_DOMAIN) and INBOUND_MX_HOST says where their MX points.
 */
export function domainSettingsFromConfig(
  config: Pick<
    Config,
    | 'bounceDomain'
    | 'inboundMxHost'
    | 'sendingSpf'
    | 'domainRecheckMs'
    | 'senderDomains'
    | 'dkim'
    | 'testDomainsWithoutDns'
  >,
): DomainSettings {
  return {
    returnPath:
      config.bounceDomain && config.inboundMxHost
        ? { mxHost: config.inboundMxHost, spf: config.sendingSpf }
        : undefined,
    recheckMs: config.domainRecheckMs,
    senderDomains: config.senderDomains,
    fallbackDkim: config.dkim,
    bounceDomain: config.bounceDomain,
    receivingMxHost: config.inboundMxHost,
    testNamesWithoutDns: config.testDomainsWithoutDns,
  };
}

/** What a domain's view says when its records are taken as published without looking DNS up. */
const WITHOUT_DNS_REASON =
  'capture mode and a reserved test name: its records count as published, without DNS (TEST_DOMAINS_WITHOUT_DNS)';

export interface DomainServiceDeps {
  db: Kysely<Database>;
  engine: Engine;
  clock: Clock;
  secretBox: SecretBox;
  dns: Pick<Dns, 'resolveTxt' | 'resolveMx'>;
  events: Pick<EventService, 'emitIn'>;
  settings: DomainSettings;
  /** Keeps the sending-domain lookups every send makes in memory while they hold (validated-cache.ts). */
  stamps?: Stamps | undefined;
}

/** How an email is authenticated, decided when it is accepted and stored with it. */
export interface SenderAuthentication {
  /** The DKIM `d=`: a verified domain of the project, the fallback DKIM_DOMAIN, or null (unsigned). */
  dkimDomain: string | null;
  /** The envelope sender's domain: the verified return path, BOUNCE_DOMAIN, or the From domain. */
  returnPathDomain: string;
}

/** What the sending worker signs an email with; absent parts fall back to the transport's own settings. */
export interface SigningIdentity {
  dkim?: DkimConfig;
  /** The customer's return-path domain to build the envelope sender on. */
  returnPathDomain?: string;
}

/** A domain with what its view needs besides its own row. */
export interface DomainState extends DomainRecord {
  /**
   * Another project holds the name, or a parent of it, verified, and this domain is not verified: it needs
   * its challenge record (besides its other records) to verify.
   */
  challengeRequired: boolean;
}

/** Other projects' verified domains among the domain's name and its parents: what stands in its way. */
function holdersOf(
  domain: Pick<DomainRecord, 'projectId' | 'name'>,
  verified: readonly DomainCoverage[],
): DomainCoverage[] {
  const names = new Set(selfAndParents(domain.name));
  return verified.filter((holder) => holder.projectId !== domain.projectId && names.has(holder.name));
}

/**
 * A verified domain stays verified while its own records match: a parent another project verifies later
 * does not take it away (most specific wins when signing). Only one that is not verified needs its challenge.
 */
const withClaims = (domain: DomainRecord, verified: readonly DomainCoverage[]): DomainState => ({
  ...domain,
  challengeRequired: domain.status !== 'verified' && holdersOf(domain, verified).length > 0,
});

/** Relaxed alignment (RFC 7489 §3.1): the same domain, or one is a subdomain of the other. */
export const aligned = (a: string, b: string): boolean =>
  a === b || a.endsWith(`.${b}`) || b.endsWith(`.${a}`);

/** A rotation decided before its transaction: the domain as read and its next key, sealed. */
interface RotationPlan {
  domain: DomainRecord;
  idOrName: string;
  next: { selector: string; publicKey: string; privateKeySealed: string };
}

export function createDomainService(deps: DomainServiceDeps) {
  const { db, engine, clock, secretBox, settings } = deps;
  const repo = createDomainRepo(db, engine, deps.stamps);
  /** Opened private keys by sealed value: opening is cheap, but a sending worker asks for every message. */
  const keys = new Map<string, string>();
  const openKey = (sealed: string): string => {
    let pem = keys.get(sealed);
    if (pem === undefined) {
      if (keys.size >= 1000) keys.clear();
      pem = secretBox.open(sealed);
      keys.set(sealed, pem);
    }
    return pem;
  };

  const recordSettings: RecordSettings = {
    returnPath: settings.returnPath,
    receivingMxHost: settings.receivingMxHost,
  };

  /**
   * Whether a domain's records count as published without a lookup: on a server in capture mode (nothing
   * leaves it), for a name no one can register. Everywhere else, test names are looked up like any other.
   */
  const verifiesWithoutDns = (name: string): boolean =>
    settings.testNamesWithoutDns === true && isReservedTestName(name);

  /** Receiving needs INBOUND_MX_HOST: the MX its owner must publish. */
  function checkReceivingAvailable(receiving: boolean | undefined) {
    if (receiving && settings.receivingMxHost === undefined) {
      throw invalidParam(
        'receiving',
        'This server receives no mail for domains: its operator has not set INBOUND_MX_HOST.',
        'receiving_unavailable',
      );
    }
  }

  function toView(domain: DomainState): DomainView {
    const records = expectedRecords(domain, recordSettings, domain.challengeRequired).map(
      (record): DomainRecordViewType => {
        const check = domain.checks?.[record.key];
        const status = !check ? 'pending' : check.matches ? 'verified' : check.found ? 'failed' : 'pending';
        return {
          purpose: record.purpose,
          type: record.type,
          name: record.name,
          value: record.value,
          ...(record.priority !== undefined ? { priority: record.priority } : {}),
          required: record.required,
          status,
          ...(check ? { found: check.found, matches: check.matches } : {}),
          ...(check?.error !== undefined ? { error: check.error } : {}),
          ...(record.rotation ? { rotation: record.rotation } : {}),
        };
      },
    );
    return {
      object: 'domain',
      id: domain.id,
      name: domain.name,
      status: domain.status,
      dkim_selector: domain.dkimSelector,
      return_path_domain: settings.returnPath ? returnPathName(domain.name) : null,
      return_path_verified: domain.returnPathVerified,
      challenge_required: domain.challengeRequired,
      receiving: domain.receiving,
      receiving_verified: domain.receivingVerified,
      verified_without_dns: verifiesWithoutDns(domain.name) ? WITHOUT_DNS_REASON : null,
      records,
      last_checked_at: domain.lastCheckedAt,
      verified_at: domain.verifiedAt,
      created_at: domain.createdAt,
      updated_at: domain.updatedAt,
    };
  }

  /** A domain of the project by id (`dom_…`) or by name; 404 otherwise (another project's too). */
  async function load(projectId: string, idOrName: string): Promise<DomainRecord> {
    let domain: DomainRecord | undefined;
    if (isId('dom', idOrName)) domain = await repo.find(projectId, idOrName);
    else {
      const name = normalizeDomainName(idOrName);
      domain = name.ok ? await repo.findByName(projectId, name.name) : undefined;
    }
    if (!domain) throw notFound('domain', idOrName);
    return domain;
  }

  /** The domains with whether each needs its challenge: one query for them all (none when all are verified). */
  async function withStates(
    domains: readonly DomainRecord[],
    through: Pick<DomainRepo, 'verifiedAmong'> = repo,
  ): Promise<DomainState[]> {
    const open = domains.filter((domain) => domain.status !== 'verified');
    const names = [...new Set(open.flatMap((domain) => selfAndParents(domain.name)))];
    const verified = await through.verifiedAmong(names);
    return domains.map((domain) => withClaims(domain, verified));
  }
  const withState = async (
    domain: DomainRecord,
    through?: Pick<DomainRepo, 'verifiedAmong'>,
  ): Promise<DomainState> => (await withStates([domain], through))[0]!;

  const exists = (name: string, holder: DomainRecord): DomainError =>
    conflict('domain_exists', `This project already has the domain '${name}' (${holder.id}).`, 'name');

  /**
   * Looks every record up, then writes the result: the new status, what was found and, when the status
   * changes to `verified` or `failed`, its event, all in one transaction. The lookups run outside it (they
   * take up to seconds); the row is read again inside, so a concurrent check or rotation is not undone.
   *
   * The challenge record is always looked up, but decides only while another project holds the name or a
   * parent of it and this domain is not verified. Verifying then takes the name over: the holder of the same
   * name becomes `failed` (its `domain.failed` in the same transaction) and stops signing; the holder of a
   * parent keeps it (this domain, more specific, covers its own name and below).
   */
  async function check(domain: DomainRecord): Promise<DomainState | undefined> {
    const expected = expectedRecords(domain, recordSettings, true);
    // Without DNS every record counts as published but the challenge: a test name another project holds
    // stays that project's.
    const results = verifiesWithoutDns(domain.name)
      ? expected.map((record): RecordCheck => ({ found: null, matches: record.purpose !== 'challenge' }))
      : await Promise.all(expected.map((record) => lookUp(deps.dns, record)));
    return inTransaction(db, async (transaction) => {
      const inside = createDomainRepo(transaction.db, engine);
      await inside.lockName(domain.name);
      const current = await inside.findForUpdate(domain.id);
      if (!current) return undefined; // deleted meanwhile
      const holders = holdersOf(current, await inside.verifiedAmong(selfAndParents(current.name)));
      const contested = current.status !== 'verified' && holders.length > 0;
      const checked = expected
        .map((record, index) => ({ record, check: results[index]! }))
        .filter(({ record }) => contested || record.purpose !== 'challenge');
      const evaluation = evaluate(current.status, checked);
      // A rotation started (or finished) while looking: what was looked up is not what the row holds now.
      const sameKeys =
        current.dkimSelector === domain.dkimSelector && current.nextDkimSelector === domain.nextDkimSelector;
      const now = clock.now();
      const checks: Record<string, RecordCheck> = {};
      expected.forEach((record, index) => (checks[record.key] = results[index]!));
      const status = evaluation.status;
      const becameVerified = status === 'verified' && current.status !== 'verified';
      // A lookup of the MX that failed decides nothing, as for the status.
      const receivingCheck = expected.findIndex((record) => record.purpose === 'receiving');
      const receivingVerified =
        receivingCheck >= 0 && results[receivingCheck]!.error !== undefined
          ? current.receivingVerified
          : evaluation.receivingVerified;
      const events: NewEvent[] = [];
      const displaced = becameVerified ? holders.find((holder) => holder.name === current.name) : undefined;
      if (displaced && (await inside.demote(displaced.id, now.toISOString()))) {
        const lost = (await inside.findForUpdate(displaced.id))!;
        events.push({
          projectId: lost.projectId,
          kind: 'domain.failed',
          data: domainEventData(toView({ ...lost, challengeRequired: true }), 'verified'),
        });
      }
      await inside.saveCheck(current.id, {
        status,
        returnPathVerified: evaluation.inconclusive
          ? current.returnPathVerified
          : evaluation.returnPathVerified,
        receivingVerified,
        checks,
        checkedAt: now.toISOString(),
        verifiedAt: becameVerified ? now.toISOString() : current.verifiedAt,
        nextCheckAt: new Date(now.getTime() + settings.recheckMs).toISOString(),
        switchTo:
          evaluation.switchKey && sameKeys && current.nextDkimSelector !== null
            ? {
                selector: current.nextDkimSelector,
                publicKey: current.nextDkimPublicKey!,
                privateKeySealed: current.nextDkimPrivateKeySealed!,
              }
            : undefined,
      });
      const updated: DomainState = {
        ...(await inside.findForUpdate(current.id))!,
        challengeRequired: status !== 'verified' && holders.length > 0,
      };
      // A verified domain whose receiving MX has just been found ready: its routes take mail from now on.
      const receivingReady = status === 'verified' && receivingVerified && !current.receivingVerified;
      if ((status !== current.status && status !== 'pending') || (receivingReady && !becameVerified)) {
        events.push({
          projectId: current.projectId,
          kind: status === 'verified' ? 'domain.verified' : 'domain.failed',
          data: domainEventData(toView(updated), current.status),
        });
      }
      if (events.length > 0) await deps.events.emitIn(transaction, events);
      return updated;
    });
  }

  return {
    toView,

    /** A fresh key pair, made before the request's transaction opens: generating one takes a while. */
    newKey: generateDkimKey,

    /**
     * Adds a domain, pending. Another project's domain of the same name does not stand in the way: the first
     * to verify holds the name, and the view says when this one needs its challenge to take it over.
     */
    /** Checks a new domain and makes its key (unless given), before any transaction; `create` stores it. */
    async prepareCreate(
      projectId: string,
      input: CreateDomainInput,
      given?: DkimKeyPair,
    ): Promise<NewDomain> {
      const checked = normalizeDomainName(input.name);
      if (!checked.ok) {
        throw invalidParam('name', `'${input.name.slice(0, 300)}' ${checked.reason}.`, 'invalid_domain');
      }
      const name = checked.name;
      checkReceivingAvailable(input.receiving);
      const own = await repo.findByName(projectId, name);
      if (own) throw exists(name, own);
      const key = given ?? (await generateDkimKey());
      const now = clock.now().toISOString();
      return {
        id: newId('dom'),
        projectId,
        name,
        dkimSelector: key.selector,
        dkimPublicKey: key.publicKey,
        dkimPrivateKeySealed: secretBox.seal(key.privateKeyPem),
        nextDkimSelector: null,
        nextDkimPublicKey: null,
        nextDkimPrivateKeySealed: null,
        // Its first background check comes one interval after creation; POST …/verify checks at once.
        nextCheckAt: new Date(Date.parse(now) + settings.recheckMs).toISOString(),
        createdAt: now,
        updatedAt: now,
        challengeToken: randomToken(18),
        receiving: input.receiving ?? false,
      };
    },

    /** Changes what an owner may change of a domain: whether it receives mail. */
    async update(projectId: string, idOrName: string, input: UpdateDomainInput): Promise<DomainState> {
      const domain = await load(projectId, idOrName);
      if (input.receiving !== undefined && input.receiving !== domain.receiving) {
        checkReceivingAvailable(input.receiving);
        await repo.setReceiving(projectId, domain.id, input.receiving, clock.now().toISOString());
      }
      return withState(await load(projectId, domain.id));
    },

    async create(transaction: Transaction, record: NewDomain): Promise<DomainState> {
      const inside = createDomainRepo(transaction.db, engine);
      if (!(await inside.insert(record))) {
        // Another request of this project added the same name between the read and the insert.
        const winner = await inside.findByName(record.projectId, record.name);
        throw winner
          ? exists(record.name, winner)
          : conflict('domain_exists', `This project just added the domain '${record.name}'.`, 'name');
      }
      return withState((await inside.find(record.projectId, record.id))!, inside);
    },

    async list(projectId: string, page: PageRequest): Promise<Page<DomainState>> {
      const found = await repo.list(projectId, page);
      return { items: await withStates(found.items), hasMore: found.hasMore };
    },

    get: async (projectId: string, idOrName: string): Promise<DomainState> =>
      withState(await load(projectId, idOrName)),

    async remove(projectId: string, idOrName: string) {
      const domain = await load(projectId, idOrName);
      if (!(await repo.delete(projectId, domain.id))) throw notFound('domain', idOrName);
      return { object: 'domain' as const, id: domain.id, deleted: true as const };
    },

    /** Looks the records up now; answers the domain with what each lookup found. */
    async verify(projectId: string, idOrName: string): Promise<DomainState> {
      const domain = await load(projectId, idOrName);
      const checked = await check(domain);
      if (!checked) throw notFound('domain', idOrName);
      return checked;
    },

    /** For the background check: looks a leased domain's records up and writes the result. */
    check,

    /**
     * Starts a key rotation: a new selector and key, listed as a `pending` record next to the current one
     * (`retiring`), which keeps signing until the new record verifies. Rotating again before that replaces
     * the pending key.
     */
    /** Reads the domain and makes its next key (unless given), before any transaction; `rotate` stores it. */
    async prepareRotate(projectId: string, idOrName: string, given?: DkimKeyPair): Promise<RotationPlan> {
      const domain = await load(projectId, idOrName);
      const key = given ?? (await generateDkimKey());
      return {
        domain,
        idOrName,
        next: {
          selector: key.selector,
          publicKey: key.publicKey,
          privateKeySealed: secretBox.seal(key.privateKeyPem),
        },
      };
    },

    async rotate(transaction: Transaction, { domain, idOrName, next }: RotationPlan): Promise<DomainState> {
      const inside = createDomainRepo(transaction.db, engine);
      const updated = await inside.setNextKey(domain.projectId, domain.id, next, clock.now().toISOString());
      if (!updated) throw notFound('domain', idOrName);
      return withState((await inside.find(domain.projectId, domain.id))!, inside);
    },

    /**
     * A sending key limited to one domain (its `domain_id`) sends only as that domain or one of its
     * subdomains: anything else is a 403 naming the domain. The one rule for the API and SMTP submission.
     */
    async authorizeKeyDomain(
      projectId: string,
      keyDomainId: string,
      fromDomain: string,
      param: string,
    ): Promise<void> {
      const from = fromDomain.toLowerCase();
      const domain = await repo.find(projectId, keyDomainId);
      if (domain && selfAndParents(from).includes(domain.name)) return;
      throw new DomainError(
        'forbidden',
        'insufficient_permission',
        domain
          ? `This key may send only from the domain '${domain.name}'; '${from}' is not it.`
          : `This key may send only from the domain '${keyDomainId}', which no longer exists; '${from}' is not it.`,
        param,
      );
    },

    /**
     * Who may send as `fromDomain`: the most specific verified domain among it and its parents decides. Held
     * by another project: refused in every mode. Held by this one: signed with its key (DMARC-aligned), its
     * return path used when verified. Neither: refused under SENDER_DOMAINS=verified, else the fallback key.
     */
    async authorizeSender(
      projectId: string,
      fromDomain: string,
      param: string,
    ): Promise<SenderAuthentication> {
      const from = fromDomain.toLowerCase();
      const candidates = await repo.covering(selfAndParents(from));
      const verified = candidates
        .filter((domain) => domain.status === 'verified')
        .sort((a, b) => b.name.length - a.name.length);
      const best = verified[0];
      if (best && best.projectId !== projectId) {
        throw invalidParam(
          param,
          `'${from}' is covered by the domain '${best.name}', which another project has verified: this project cannot send as it.`,
          'sender_domain_not_allowed',
        );
      }
      if (best) {
        return {
          dkimDomain: best.name,
          returnPathDomain:
            settings.returnPath && best.returnPathVerified
              ? returnPathName(best.name)
              : (settings.bounceDomain ?? from),
        };
      }
      if (settings.senderDomains === 'verified') {
        const own = candidates
          .filter((domain) => domain.projectId === projectId)
          .sort((a, b) => b.name.length - a.name.length)[0];
        throw invalidParam(
          param,
          own
            ? `The domain '${from}' is covered by this project's domain '${own.name}', which is ${own.status}: publish its DNS records and verify it (POST /v1/domains/${own.id}/verify).`
            : `The domain '${from}' is not a verified domain of this project: add it (POST /v1/domains {"name": "${from}"}), publish its DNS records and verify it.`,
          'sender_domain_not_verified',
        );
      }
      return {
        dkimDomain: settings.fallbackDkim?.domain ?? null,
        returnPathDomain: settings.bounceDomain ?? from,
      };
    },

    /**
     * The key to sign an accepted email with: that of the project's domain it was accepted for, while it is
     * verified (else nothing: the transport's fallback key signs, as for an unverified domain; so a domain
     * another project took over, or whose records stopped matching, signs nothing more), and its return
     * path when the email was accepted with it.
     */
    async signingFor(
      projectId: string,
      email: { dkimDomain: string | null; returnPathDomain: string | null },
    ): Promise<SigningIdentity> {
      if (email.dkimDomain === null) return {};
      const domain = await repo.findByName(projectId, email.dkimDomain);
      if (!domain || domain.status !== 'verified') return {};
      const returnPath = returnPathName(domain.name);
      return {
        dkim: {
          domain: domain.name,
          selector: domain.dkimSelector,
          privateKey: openKey(domain.dkimPrivateKeySealed),
        },
        ...(email.returnPathDomain === returnPath ? { returnPathDomain: returnPath } : {}),
      };
    },

    /**
     * Whether mail to `name` is ours to receive as a return path: `bounces.<domain>` for a domain some
     * project has added (the inbound listener asks before accepting RCPT TO; the address's tag still decides).
     */
    isReturnPathDomain: (name: string): Promise<boolean> => repo.isReturnPathDomain(name),
  };
}

/** The data of `domain.verified` and `domain.failed`: the domain as the API shows it, and what it was. */
function domainEventData(view: DomainView, previous: DomainStatus): Record<string, unknown> {
  return {
    domain_id: view.id,
    name: view.name,
    status: view.status,
    previous_status: previous,
    challenge_required: view.challenge_required,
    receiving: view.receiving,
    receiving_verified: view.receiving_verified,
    records: view.records.map((record) => ({
      purpose: record.purpose,
      type: record.type,
      name: record.name,
      value: record.value,
      status: record.status,
      found: record.found ?? null,
    })),
  };
}

export type DomainService = ReturnType<typeof createDomainService>;
