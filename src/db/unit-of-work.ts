import { AsyncLocalStorage } from 'node:async_hooks';
import {
  CompiledQuery,
  type DatabaseConnection,
  type Dialect,
  type DialectAdapter,
  type Driver,
  type TransactionSettings,
} from 'kysely';

// A unit of work: one transaction that everything a piece of code writes joins, whichever repository
// writes it. A request with an Idempotency-Key runs its handler in one, so the resource it creates and the
// saved response commit together or not at all (src/http/idempotency.ts).
//
// It works below the repositories, in the driver: while a unit is open in the current async context, every
// query takes the unit's connection, and the transactions repositories open themselves join the unit's
// (their begin and commit do nothing; a failure still rolls the whole unit back, since it propagates).

interface OpenUnit {
  connection: DatabaseConnection;
  /** False once the unit commits or rolls back: a timer it scheduled then queries outside it. */
  open: boolean;
  afterCommit: Array<() => void>;
}

const current = new AsyncLocalStorage<OpenUnit>();

const joined = (connection: DatabaseConnection): boolean => {
  const unit = current.getStore();
  return unit !== undefined && unit.open && unit.connection === connection;
};

/** One holder at a time, the others served in arrival order. */
class Lock {
  #held = false;
  readonly #waiting: Array<() => void> = [];
  async acquire(): Promise<void> {
    if (!this.#held) {
      this.#held = true;
      return;
    }
    await new Promise<void>((resolve) => this.#waiting.push(resolve));
  }
  release(): void {
    const next = this.#waiting.shift();
    if (next) next();
    else this.#held = false;
  }
}

/**
 * A driver whose connections and transactions join the open unit of work, if any. On an engine with one
 * connection (SQLite) it is also the connection's lock, held by a unit (or a group of them) from its begin to
 * its commit, so that no other query runs inside its transaction meanwhile; Kysely's own lock, taken per
 * query, would let one in whenever a unit awaits something else.
 */
class UnitOfWorkDriver implements Driver {
  readonly inner: Driver;
  readonly #lock: Lock | undefined;
  constructor(inner: Driver, exclusive: boolean) {
    this.inner = inner;
    this.#lock = exclusive ? new Lock() : undefined;
  }
  init(): Promise<void> {
    return this.inner.init();
  }
  async acquireConnection(): Promise<DatabaseConnection> {
    const unit = current.getStore();
    if (unit?.open) return unit.connection;
    await this.#lock?.acquire();
    try {
      return await this.inner.acquireConnection();
    } catch (error) {
      this.#lock?.release();
      throw error;
    }
  }
  async beginTransaction(connection: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    if (!joined(connection)) await this.inner.beginTransaction(connection, settings);
  }
  async commitTransaction(connection: DatabaseConnection): Promise<void> {
    if (!joined(connection)) await this.inner.commitTransaction(connection);
  }
  async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    if (!joined(connection)) await this.inner.rollbackTransaction(connection);
  }
  async releaseConnection(connection: DatabaseConnection): Promise<void> {
    if (joined(connection)) return;
    try {
      await this.inner.releaseConnection(connection);
    } finally {
      this.#lock?.release();
    }
  }
  destroy(): Promise<void> {
    return this.inner.destroy();
  }
}

/**
 * Group commit: units of work that arrive while one runs share its transaction, and its commit. Each runs
 * in a savepoint of its own, one at a time on the group's connection: a unit that fails rolls back to its
 * savepoint, taking nothing of the others with it. Every unit settles only after the group's COMMIT (or its
 * failure): a unit is answered only once its writes are durable, a failed COMMIT fails every unit in the
 * group, and a unit that lost a race to another of the group (an Idempotency-Key) reads the winner's
 * committed answer.
 */
export interface GroupCommitSettings {
  /** A group takes new units for at most this long after it began; later ones start the next group. */
  windowMs: number;
  /** The most units one transaction takes (PostgreSQL keeps 64 subtransactions per backend cheaply). */
  maxUnits: number;
  /** The statement that opens a group's transaction (SQLite: `begin immediate`, so it waits for the write lock at once). */
  begin: string;
}

/** The dialect, with a driver that lets units of work (`runUnitOfWork`) run on it, grouped if asked. */
export function withUnitsOfWork(
  dialect: Dialect,
  groupCommit?: GroupCommitSettings,
): { dialect: Dialect; driver: () => UnitOfWorkDriver; groups: () => GroupCommitter | undefined } {
  let driver: UnitOfWorkDriver | undefined;
  let groups: GroupCommitter | undefined;
  const exclusive = !dialect.createAdapter().supportsMultipleConnections;
  return {
    dialect: {
      createDriver: () => {
        driver = new UnitOfWorkDriver(dialect.createDriver(), exclusive);
        if (groupCommit) groups = new GroupCommitter(driver, groupCommit);
        return driver;
      },
      createQueryCompiler: () => dialect.createQueryCompiler(),
      // The driver locks the one connection itself (see UnitOfWorkDriver), so Kysely need not.
      createAdapter: () => {
        const adapter = dialect.createAdapter();
        return exclusive
          ? (Object.create(adapter, { supportsMultipleConnections: { value: true } }) as DialectAdapter)
          : adapter;
      },
      createIntrospector: (db) => dialect.createIntrospector(db),
    },
    driver: () => {
      if (!driver) throw new Error('The database has not been used yet.');
      return driver;
    },
    groups: () => groups,
  };
}

/**
 * Runs `work` in a unit of work on `driver`: one transaction for everything it writes, committed when it
 * resolves, rolled back when it throws. Units do not nest: inside one, `work` simply joins it. With a group
 * committer, the unit runs in a shared transaction (see GroupCommitSettings).
 */
export async function runUnitOfWork<T>(
  driver: UnitOfWorkDriver,
  work: () => Promise<T>,
  groups?: GroupCommitter,
): Promise<T> {
  if (current.getStore()?.open) return work();
  if (groups) return groups.run(work);
  const connection = await driver.acquireConnection();
  const unit: OpenUnit = { connection, open: true, afterCommit: [] };
  try {
    await driver.inner.beginTransaction(connection, {});
    let result: T;
    try {
      result = await current.run(unit, work);
    } catch (error) {
      unit.open = false;
      await driver.inner.rollbackTransaction(connection);
      throw error;
    }
    unit.open = false;
    await driver.inner.commitTransaction(connection);
    // Outside the unit's context, so nothing they start can think it is still in the transaction.
    current.exit(() => {
      for (const callback of unit.afterCommit) callback();
    });
    return result;
  } finally {
    unit.open = false;
    await driver.releaseConnection(connection);
  }
}

interface Member {
  work: () => Promise<unknown>;
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

/** A unit that ran in the group: its result (or its own error) is given once the group has ended. */
type Ran = { member: Member; unit: OpenUnit } & (
  { ok: true; value: unknown } | { ok: false; error: unknown }
);

const SAVEPOINT = CompiledQuery.raw('savepoint pw_unit');
const ROLLBACK_TO_SAVEPOINT = CompiledQuery.raw('rollback to savepoint pw_unit');

/**
 * Runs units of work in shared transactions, one group at a time (see GroupCommitSettings). It runs outside
 * any unit, so `driver` passes its begin, commit and release through (and takes the connection's lock).
 */
export class GroupCommitter {
  readonly #driver: Driver;
  readonly #settings: GroupCommitSettings;
  readonly #begin: CompiledQuery;
  #queue: Member[] = [];
  #running = false;

  constructor(driver: Driver, settings: GroupCommitSettings) {
    this.#driver = driver;
    this.#settings = settings;
    this.#begin = CompiledQuery.raw(settings.begin);
  }

  run<T>(work: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#queue.push({ work, resolve: resolve as (value: unknown) => void, reject });
      if (this.#running) return;
      this.#running = true;
      // Outside the caller's context: the groups belong to no request.
      current.exit(() => void this.#drive());
    });
  }

  async #drive(): Promise<void> {
    try {
      while (this.#queue.length > 0) await this.#group();
    } finally {
      this.#running = false;
    }
  }

  async #group(): Promise<void> {
    let connection: DatabaseConnection;
    try {
      connection = await this.#driver.acquireConnection();
    } catch (error) {
      for (const member of this.#queue.splice(0)) member.reject(error);
      return;
    }
    const ran: Ran[] = [];
    try {
      try {
        await connection.executeQuery(this.#begin);
      } catch (error) {
        for (const member of this.#queue.splice(0)) member.reject(error);
        return;
      }
      const startedAt = performance.now();
      let failure: { error: unknown } | undefined;
      while (failure === undefined && ran.length < this.#settings.maxUnits) {
        if (this.#queue.length === 0) {
          // One turn of the event loop for requests already read to reach their unit, within the window.
          if (performance.now() - startedAt >= this.#settings.windowMs) break;
          await new Promise((resolve) => setImmediate(resolve));
          if (this.#queue.length === 0) break;
        }
        const member = this.#queue.shift()!;
        const unit: OpenUnit = { connection, open: true, afterCommit: [] };
        // The first unit in the transaction needs no savepoint: when it fails, the whole transaction (its
        // own writes only) is rolled back and begun again. A statement saved for every group of one.
        const first = !ran.some((entry) => entry.ok);
        try {
          if (!first) await connection.executeQuery(SAVEPOINT);
        } catch (error) {
          ran.push({ member, unit, ok: false, error });
          failure = { error };
          break;
        }
        try {
          const value = await current.run(unit, member.work);
          unit.open = false;
          ran.push({ member, unit, ok: true, value });
        } catch (error) {
          unit.open = false;
          ran.push({ member, unit, ok: false, error });
          // Its writes go; the others' stay. Failing that, the transaction is lost for every unit.
          try {
            if (first) {
              await this.#driver.rollbackTransaction(connection);
              await connection.executeQuery(this.#begin);
            } else {
              await connection.executeQuery(ROLLBACK_TO_SAVEPOINT);
            }
          } catch (lost) {
            failure = { error: lost };
          }
        }
        if (performance.now() - startedAt >= this.#settings.windowMs) break;
      }
      if (failure === undefined) {
        try {
          await this.#driver.commitTransaction(connection);
        } catch (error) {
          failure = { error };
        }
      }
      if (failure !== undefined) {
        await this.#driver.rollbackTransaction(connection).catch(() => undefined);
        for (const entry of ran) entry.member.reject(entry.ok ? failure.error : entry.error);
        return;
      }
      for (const entry of ran) {
        if (!entry.ok) {
          entry.member.reject(entry.error);
          continue;
        }
        current.exit(() => {
          for (const callback of entry.unit.afterCommit) callback();
        });
        entry.member.resolve(entry.value);
      }
    } finally {
      await this.#driver.releaseConnection(connection);
    }
  }
}

/** True while the current async context is inside an open unit of work (its queries join it). */
export function inUnitOfWork(): boolean {
  return current.getStore()?.open === true;
}

/**
 * Runs `work` outside any unit of work. A timer started inside a unit inherits its async context: firing
 * while the unit is still open, its query would borrow the unit's connection and could hand it back to the
 * pool after the unit did (a double release, a 500 on PostgreSQL). Deferred work that is not part of the
 * unit starts through this.
 */
export function outsideUnitOfWork<T>(work: () => T): T {
  return current.exit(work);
}

/**
 * Registers `callback` to run after the open unit of work commits; false when no unit is open (the caller
 * commits on its own and runs it itself).
 */
export function afterUnitCommits(callback: () => void): boolean {
  const unit = current.getStore();
  if (!unit?.open) return false;
  unit.afterCommit.push(callback);
  return true;
}
