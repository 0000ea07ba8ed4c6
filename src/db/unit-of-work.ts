import { AsyncLocalStorage } from 'node:async_hooks';
import type { DatabaseConnection, Dialect, Driver, TransactionSettings } from 'kysely';

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

/** A driver whose connections and transactions join the open unit of work, if any. */
class UnitOfWorkDriver implements Driver {
  readonly inner: Driver;
  constructor(inner: Driver) {
    this.inner = inner;
  }
  init(): Promise<void> {
    return this.inner.init();
  }
  acquireConnection(): Promise<DatabaseConnection> {
    const unit = current.getStore();
    return unit?.open ? Promise.resolve(unit.connection) : this.inner.acquireConnection();
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
    if (!joined(connection)) await this.inner.releaseConnection(connection);
  }
  destroy(): Promise<void> {
    return this.inner.destroy();
  }
}

/** The dialect, with a driver that lets units of work (`runUnitOfWork`) run on it. */
export function withUnitsOfWork(dialect: Dialect): { dialect: Dialect; driver: () => UnitOfWorkDriver } {
  let driver: UnitOfWorkDriver | undefined;
  return {
    dialect: {
      createDriver: () => (driver = new UnitOfWorkDriver(dialect.createDriver())),
      createQueryCompiler: () => dialect.createQueryCompiler(),
      createAdapter: () => dialect.createAdapter(),
      createIntrospector: (db) => dialect.createIntrospector(db),
    },
    driver: () => {
      if (!driver) throw new Error('The database has not been used yet.');
      return driver;
    },
  };
}

/**
 * Runs `work` in a unit of work on `driver`: one transaction for everything it writes, committed when it
 * resolves, rolled back when it throws. Units do not nest: inside one, `work` simply joins it.
 */
export async function runUnitOfWork<T>(driver: UnitOfWorkDriver, work: () => Promise<T>): Promise<T> {
  if (current.getStore()?.open) return work();
  const connection = await driver.inner.acquireConnection();
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
    await driver.inner.releaseConnection(connection);
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
