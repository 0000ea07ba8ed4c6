import type { Kysely } from 'kysely';
import type { Page, PageRequest } from '../../db/pagination.ts';
import type { Database } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { Clock } from '../../lib/clock.ts';
import type { Dns } from '../../lib/dns.ts';
import { conflict, DomainError, invalidParam, notFound } from '../../lib/errors.ts';
import { randomToken, type SecretBox } from '../../lib/crypto.ts';
import { isId, newId } from '../../lib/ids.ts';
import type { EventService } from '../events/events.service.ts';
import { type DkimKeyPair, generateDkimKey } from './dkim-key.ts';
import { createDomainCheck } from './domain-check.ts';
import { normalizeDomainName, selfAndParents } from './domain-name.ts';
import type { DomainSettings } from './domain-settings.ts';
import { type DomainState, withStates as statesOf } from './domain-state.ts';
import { createDomainViews } from './domain-view.ts';
import type { DomainRecord, DomainRepo, NewDomain } from './domains.repo.ts';
import type { CreateDomainInput, UpdateDomainInput } from './domains.schemas.ts';
import { createSenderPolicy } from './sender-policy.ts';

// A project's sending domains: adding, changing and removing them, and their DKIM keys (made before the
// request's transaction, stored in it). The parts are apart: what a domain's records are checked against
// and what a check writes (domain-check.ts), how a domain is shown (domain-view.ts), who may send as a
// domain and with which key (sender-policy.ts). createDomainService is the one entry that wires them.

export { type DomainSettings, domainSettingsFromConfig } from './domain-settings.ts';
export type { DomainState } from './domain-state.ts';
export { aligned, type SenderAuthentication, type SigningIdentity } from './sender-policy.ts';

export interface DomainServiceDeps {
  db: Kysely<Database>;
  repo: DomainRepo;
  clock: Clock;
  secretBox: SecretBox;
  dns: Pick<Dns, 'resolveTxt' | 'resolveMx' | 'resolveAddresses' | 'resolve'>;
  events: Pick<EventService, 'emitIn'>;
  settings: DomainSettings;
}

/** A rotation decided before its transaction: the domain as read and its next key, sealed. */
interface RotationPlan {
  domain: DomainRecord;
  idOrName: string;
  next: { selector: string; publicKey: string; privateKeySealed: string };
}

export function createDomainService(deps: DomainServiceDeps) {
  const { repo, clock, secretBox, settings } = deps;
  const views = createDomainViews(settings);
  const { toView } = views;
  const check = createDomainCheck({ ...deps, views });
  const senders = createSenderPolicy({ repo, secretBox, settings });

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

  const withStates = (domains: readonly DomainRecord[], transaction?: Transaction): Promise<DomainState[]> =>
    statesOf(domains, repo, transaction);
  const withState = async (domain: DomainRecord, transaction?: Transaction): Promise<DomainState> =>
    (await withStates([domain], transaction))[0]!;

  const exists = (name: string, holder: DomainRecord): DomainError =>
    conflict('domain_exists', `This project already has the domain '${name}' (${holder.id}).`, 'name');

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
      if (input.dmarc_reports !== undefined && input.dmarc_reports !== domain.dmarcReports) {
        await repo.setDmarcReports(projectId, domain.id, input.dmarc_reports, clock.now().toISOString());
      }
      return withState(await load(projectId, domain.id));
    },

    async create(transaction: Transaction, record: NewDomain): Promise<DomainState> {
      if (!(await repo.insert(record, transaction))) {
        // Another request of this project added the same name between the read and the insert.
        const winner = await repo.findByName(record.projectId, record.name, transaction);
        throw winner
          ? exists(record.name, winner)
          : conflict('domain_exists', `This project just added the domain '${record.name}'.`, 'name');
      }
      return withState((await repo.find(record.projectId, record.id, transaction))!, transaction);
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
     * The verified domain a DMARC report about `name` belongs to: the name itself, else its nearest verified
     * parent (one verified holder per name, whichever project).
     */
    /** The project reading the DMARC reports mailed to `address` (`dmarc@<its verified domain>`), if one does. */
    async dmarcReportsReader(address: string): Promise<{ projectId: string } | undefined> {
      const at = address.lastIndexOf('@');
      if (address.slice(0, at).toLowerCase() !== 'dmarc') return undefined;
      const domain = await repo.dmarcReportsAt(address.slice(at + 1).toLowerCase());
      return domain && { projectId: domain.projectId };
    },

    async holderOf(name: string) {
      const holders = await repo.verifiedAmong(selfAndParents(name));
      return holders.sort((a, b) => b.name.length - a.name.length)[0];
    },

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
      const now = clock.now().toISOString();
      const updated = await repo.setNextKey(domain.projectId, domain.id, next, now, transaction);
      if (!updated) throw notFound('domain', idOrName);
      return withState((await repo.find(domain.projectId, domain.id, transaction))!, transaction);
    },

    ...senders,
  };
}

export type DomainService = ReturnType<typeof createDomainService>;
