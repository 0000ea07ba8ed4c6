import type { EmailStatus, RecipientStatus } from '../../db/schema.ts';

/** Recipient statuses that are still being worked on. */
export const PENDING: ReadonlySet<RecipientStatus> = new Set(['queued', 'delayed']);

/**
 * What an email as a whole shows, from its recipients: still going (`queued`, `delayed` when a recipient
 * is waiting for a retry), else their common final status, `cancelled` when all were, or `mixed`.
 */
export function summarizeStatus(statuses: readonly RecipientStatus[]): EmailStatus {
  if (statuses.some((status) => PENDING.has(status))) {
    return statuses.includes('delayed') ? 'delayed' : 'queued';
  }
  const distinct = new Set(statuses);
  if (distinct.size === 1) return statuses[0]!;
  return 'mixed';
}
