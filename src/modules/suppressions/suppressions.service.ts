import type { PageRequest } from '../../db/pagination.ts';
import type { SuppressionReason } from '../../db/schema.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { Clock } from '../../lib/clock.ts';
import { DomainError, invalidParam, notFound } from '../../lib/errors.ts';
import { isId } from '../../lib/ids.ts';
import { parseAddress } from '../../lib/addresses.ts';
import type { AddSuppressionsInput, SuppressionView } from './suppressions.schemas.ts';
import {
  type NewSuppression,
  normalizeAddress,
  type SuppressionRecord,
  type SuppressionRepo,
} from './suppressions.repo.ts';

export const toSuppressionView = (record: SuppressionRecord): SuppressionView => ({
  object: 'suppression',
  id: record.id,
  address: record.address,
  reason: record.reason,
  email_id: record.emailId,
  detail: record.detail,
  created_at: record.createdAt,
});

const isAddress = (value: string): boolean => {
  const parsed = parseAddress(value);
  return parsed.ok && parsed.value.name === null;
};

const notSuppressed = (address: string): DomainError =>
  new DomainError('not_found', 'resource_missing', `'${address}' is not on the suppression list.`, 'address');

/**
 * The per-project suppression list: addresses not sent to any more. Entries come from hard bounces and
 * complaints (in the transaction that records them), unsubscribes, and the API.
 */
export function createSuppressionService({ repo, clock }: { repo: SuppressionRepo; clock: Clock }) {
  return {
    list(projectId: string, page: PageRequest, reason?: SuppressionReason) {
      return repo.list(projectId, page, reason);
    },

    async get(projectId: string, address: string): Promise<SuppressionRecord> {
      // Only an address can be on the list: anything else (a NUL byte, text) is answered without a query.
      const record = isAddress(address) ? await repo.find(projectId, address) : undefined;
      if (!record) throw notSuppressed(address);
      return record;
    },

    /** An entry by its id (`sup_…`) or its address (Resend's SDK takes either); 404 when there is none. */
    async getByIdOrAddress(projectId: string, idOrAddress: string): Promise<SuppressionRecord> {
      if (!isId('sup', idOrAddress)) return this.get(projectId, idOrAddress);
      const record = await repo.findById(projectId, idOrAddress);
      if (!record) throw notFound('suppression', idOrAddress);
      return record;
    },

    /** Checks addresses to add by hand (`manual`), before any transaction; `add` then adds them. */
    prepareAdd(projectId: string, input: AddSuppressionsInput): NewSuppression[] {
      const addresses = input.addresses.map((raw, index) => {
        const parsed = parseAddress(raw);
        if (!parsed.ok || parsed.value.name !== null) {
          throw invalidParam(
            `addresses[${index}]`,
            `'${raw}' is not an email address such as a@example.com${parsed.ok ? ' (without a name)' : `: ${parsed.reason}`}.`,
            'invalid_address',
          );
        }
        return parsed.value.address;
      });
      const createdAt = clock.now().toISOString();
      return addresses.map((address) => ({
        projectId,
        address,
        reason: 'manual',
        emailId: null,
        detail: null,
        createdAt,
      }));
    },

    /**
     * Adds the entries in `transaction` (an address already on the list keeps its entry: the first cause
     * stays); returns every entry for them, new or already there.
     */
    async add(transaction: Transaction, entries: NewSuppression[]): Promise<SuppressionRecord[]> {
      const [first] = entries;
      if (!first) return [];
      await repo.add(entries, transaction);
      const addresses = entries.map((entry) => entry.address);
      const stored = await repo.matching(first.projectId, addresses, transaction);
      return [...new Set(addresses.map(normalizeAddress))].map((address) => stored.get(address)!);
    },

    async remove(
      projectId: string,
      address: string,
    ): Promise<{ object: 'suppression'; address: string; deleted: true }> {
      if (!isAddress(address) || !(await repo.delete(projectId, address))) throw notSuppressed(address);
      return { object: 'suppression', address: normalizeAddress(address), deleted: true };
    },
  };
}

export type SuppressionService = ReturnType<typeof createSuppressionService>;
