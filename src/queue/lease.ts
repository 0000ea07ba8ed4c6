import { hostname } from 'node:os';
import { randomToken } from '../lib/crypto.ts';

/** A claim's lease: the rows are `workerId`'s until `until`; past it, another worker may take them. */
export interface Lease {
  workerId: string;
  now: Date;
  until: Date;
}

/** A lease as the queue tables store it: ISO timestamps, compared as text. */
export interface StoredLease {
  workerId: string;
  now: string;
  lockedUntil: string;
}

export const storedLease = (lease: Lease): StoredLease => ({
  workerId: lease.workerId,
  now: lease.now.toISOString(),
  lockedUntil: lease.until.toISOString(),
});

/** A worker's name in `locked_by`: the host and process, and a random part so two workers of one process differ. */
export const newWorkerId = (): string => `${hostname()}/${process.pid}/${randomToken(6)}`;
