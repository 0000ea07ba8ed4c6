import type { Transaction } from '../../db/transaction.ts';

// What a change to contacts does to automations, in the change's transaction (src/services.ts hands the
// automations' side in): new runs for the automations the change triggers, and the end of the runs of contacts
// deleted or unsubscribed. Written with the change, so a crash loses neither and no retry doubles them.

export type ContactChange =
  | { kind: 'created' }
  | { kind: 'added_to_segment'; segmentId: string }
  | { kind: 'topic_subscribed'; topicId: string }
  | { kind: 'deleted' }
  | { kind: 'unsubscribed' };

export interface ContactTriggers {
  /** These contacts of the project changed so, in `transaction`. */
  changedIn(
    transaction: Transaction,
    projectId: string,
    change: ContactChange,
    contactIds: readonly string[],
  ): Promise<void>;
}

/** Nothing triggered (a service built without automations: some tests and tools). */
export const noContactTriggers: ContactTriggers = { changedIn: async () => {} };
