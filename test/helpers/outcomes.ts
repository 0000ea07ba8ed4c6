// Delivery outcomes as the sending and inbound workers emit them, written straight in: what the reputation
// breaker counts (test/reputation.test.ts, and the dashboard's sending health in
// test/dashboard-automations.test.ts) without mailing hundreds of messages.
import { inTransaction } from '../../src/db/transaction.ts';
import type { TestApp } from './app.ts';

/** `n` events of `kind` for mail from `news@<domain>` in `projectId`, in one transaction (as a worker's batch). */
export async function emitOutcomes(
  api: TestApp,
  projectId: string,
  domain: string,
  kind: 'email.sent' | 'email.bounced' | 'email.complained',
  n: number,
): Promise<void> {
  const events = Array.from({ length: n }, (_, index) => ({
    projectId,
    kind,
    data: {
      email_id: `msg_${index}`,
      from: `News <news@${domain}>`,
      to: [`r${index}@example.org`],
      subject: 'Hello',
      tags: { campaign: 'spring' },
      recipient: `r${index}@example.org`,
      ...(kind === 'email.bounced'
        ? {
            bounce: {
              type: 'hard',
              status: '5.1.1',
              diagnostic: '550 5.1.1 no such user',
              reporting_mta: null,
            },
          }
        : {}),
    },
  }));
  await inTransaction(api.database.handle.db, (transaction) => api.events.emitIn(transaction, events));
}
