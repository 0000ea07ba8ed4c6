import type { Engine } from '../../db/handle.ts';
import type { NewEmail } from './emails.repo.ts';

// Accepted sends, written together. While a group of sends is being written (or, on PostgreSQL, as many
// groups as GROUPS_IN_FLIGHT says), the sends that arrive wait; the next group takes them all and writes them with one statement per table (their suppressions read
// once, all emails in one INSERT, all recipients in one, each project's daily count once) in one
// transaction: the statements a send costs are shared by every send in its group. Each send is answered
// only once the group's transaction has committed, so nothing is answered before it is durable.
//
// A group is all or nothing, so when its write fails (a project past its daily limit, or any error inside
// the transaction) every send in it is stored again on its own, as it would have been without grouping: the
// one at fault gets its own refusal and the others are stored. A failed COMMIT is not retried: whether it
// took effect is unknown, so each send of the group answers with that error, as a lone send would.

export interface SendGroupsDeps {
  /** Writes the emails of many sends in one transaction, or throws with nothing of them stored. */
  writeTogether(emails: NewEmail[], inside: { failed(error: unknown): void }): Promise<void>;
  /** Stores one send's emails on their own, with the answers a send outside any group gets. */
  storeAlone(emails: NewEmail[], now: Date): Promise<void>;
  /** Told once a group's emails are stored (it wakes the sending worker). */
  stored(emails: NewEmail[]): void;
  /** The most emails one group takes; a send larger than this is written as a group of its own. */
  maxEmails: number;
  /** Groups written at once (`GROUPS_IN_FLIGHT`); 1 by default. */
  inFlight?: number | undefined;
}

/**
 * Groups written at once, by engine. SQLite writes one transaction at a time anyway. On PostgreSQL a group
 * spends most of its time waiting for its COMMIT's WAL flush (5 ms of the 8 ms a group took in bench:send on the
 * 2-vCPU VM, from the server's statement log), which concurrent transactions share: the next group is written
 * while the one before waits, instead of after. Two, not more: each group more in flight makes the groups
 * smaller, and each send pays for more statements (bench/README.md, issue 43).
 */
export const GROUPS_IN_FLIGHT: Record<Engine, number> = { sqlite: 1, postgres: 2 };

interface Waiting {
  emails: NewEmail[];
  now: Date;
  resolve(): void;
  reject(error: unknown): void;
}

export function createSendGroups({
  writeTogether,
  storeAlone,
  stored,
  maxEmails,
  inFlight = 1,
}: SendGroupsDeps) {
  const waiting: Waiting[] = [];
  /** Groups being written now. */
  let writing = 0;
  /** A group is being formed: it is taken a turn of the event loop after the send that started it. */
  let forming = false;

  /** The sends waiting longest, up to maxEmails emails (at least one send). */
  function nextGroup(): Waiting[] {
    let count = waiting[0]!.emails.length;
    let taken = 1;
    while (taken < waiting.length && count + waiting[taken]!.emails.length <= maxEmails) {
      count += waiting[taken]!.emails.length;
      taken += 1;
    }
    return waiting.splice(0, taken);
  }

  const alone = (send: Waiting) => storeAlone(send.emails, send.now).then(send.resolve, send.reject);

  async function write(group: Waiting[]): Promise<void> {
    if (group.length === 1) return alone(group[0]!);
    const emails = group.flatMap((send) => send.emails);
    let inside: { error: unknown } | undefined;
    try {
      await writeTogether(emails, { failed: (error) => (inside = { error }) });
    } catch (error) {
      if (inside === undefined || inside.error !== error) {
        for (const send of group) send.reject(error);
        return;
      }
      // Rolled back before the commit: nothing was stored, each send is stored on its own instead.
      await Promise.all(group.map(alone));
      return;
    }
    stored(emails);
    for (const send of group) send.resolve();
  }

  /** Forms the next group, when sends wait and fewer than `inFlight` groups are being written. */
  function formNext(): void {
    if (forming || writing >= inFlight || waiting.length === 0) return;
    forming = true;
    // One turn of the event loop, for requests already read to reach here and join the group.
    setImmediate(() => {
      forming = false;
      writing += 1;
      void write(nextGroup()).finally(() => {
        writing -= 1;
        formNext();
      });
      formNext();
    });
  }

  return {
    /** Stores one send's emails with the group being formed; resolves once they are committed. */
    accept(emails: NewEmail[], now: Date): Promise<void> {
      return new Promise<void>((resolve, reject) => {
        waiting.push({ emails, now, resolve, reject });
        formNext();
      });
    },
  };
}

export type SendGroups = ReturnType<typeof createSendGroups>;
