// What the emails repository throws inside a transaction so that it rolls back with nothing stored, and the
// caller answers why (send-store.ts, scheduled-changes.ts).

/** Thrown inside the accept transaction (so nothing is stored) when the daily limit would be passed. */
export class DailyLimitReached extends Error {
  readonly usedBefore: number;
  constructor(usedBefore: number) {
    super('daily send limit reached');
    this.usedBefore = usedBefore;
  }
}

/**
 * Thrown by `insert` with nothing stored when its `unlessFound` query found a row (a recipient of the group may
 * be suppressed): the caller writes the emails the way that reads the list first.
 */
export class GuardFound extends Error {
  constructor() {
    super('the guard of the accepting statement found a row');
  }
}

/** The email can no longer be cancelled; thrown so that the cancelling transaction rolls back. */
export class CancelRefused extends Error {}

/** The email can no longer be rescheduled; thrown so that the rescheduling transaction rolls back. */
export class RescheduleRefused extends Error {}
