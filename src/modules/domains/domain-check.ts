import type { Kysely } from 'kysely';
import type { Database } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Clock } from '../../lib/clock.ts';
import type { Dns } from '../../lib/dns.ts';
import type { EventService, NewEvent } from '../events/events.service.ts';
import { checkCompliance } from './compliance.ts';
import { selfAndParents } from './domain-name.ts';
import type { DomainSettings } from './domain-settings.ts';
import { type DomainState, holdersOf } from './domain-state.ts';
import { type DomainViews, domainEventData } from './domain-view.ts';
import type { DomainRecord, DomainRepo } from './domains.repo.ts';
import { evaluate, expectedRecords, lookUp, type RecordCheck } from './records.ts';

// A domain's check, by the background re-check and POST /v1/domains/{id}/verify alike: its records looked
// up outside any transaction, then its status, what was found and its events written in one.

export interface DomainCheckDeps {
  db: Kysely<Database>;
  repo: DomainRepo;
  clock: Clock;
  dns: Pick<Dns, 'resolveTxt' | 'resolveMx' | 'resolveAddresses' | 'resolve'>;
  events: Pick<EventService, 'emitIn'>;
  settings: Pick<DomainSettings, 'recheckMs' | 'compliance'>;
  views: DomainViews;
}

export function createDomainCheck(deps: DomainCheckDeps) {
  const { db, repo, clock, settings, views } = deps;
  const { recordSettings, verifiesWithoutDns, toView } = views;

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
    const withoutDns = verifiesWithoutDns(domain.name);
    const [results, compliance] = await Promise.all([
      withoutDns
        ? expected.map((record): RecordCheck => ({ found: null, matches: record.purpose !== 'challenge' }))
        : Promise.all(expected.map((record) => lookUp(deps.dns, record))),
      // Alongside the records and, like them, outside the transaction (compliance.ts).
      withoutDns || !settings.compliance ? null : checkCompliance(deps.dns, domain, settings.compliance),
    ]);
    return inTransaction(db, async (transaction) => {
      await repo.lockName(domain.name, transaction);
      const current = await repo.findForUpdate(domain.id, transaction);
      if (!current) return undefined; // deleted meanwhile
      const holders = holdersOf(current, await repo.verifiedAmong(selfAndParents(current.name), transaction));
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
      if (displaced && (await repo.demote(displaced.id, now.toISOString(), transaction))) {
        const lost = (await repo.findForUpdate(displaced.id, transaction))!;
        events.push({
          projectId: lost.projectId,
          kind: 'domain.failed',
          data: domainEventData(toView({ ...lost, challengeRequired: true }), 'verified'),
        });
      }
      await repo.saveCheck(
        current.id,
        {
          status,
          returnPathVerified: evaluation.inconclusive
            ? current.returnPathVerified
            : evaluation.returnPathVerified,
          receivingVerified,
          checks,
          compliance,
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
        },
        transaction,
      );
      const updated: DomainState = {
        ...(await repo.findForUpdate(current.id, transaction))!,
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

  return check;
}
