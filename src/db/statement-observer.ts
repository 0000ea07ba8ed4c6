import type { DatabaseConnection, Dialect, Driver } from 'kysely';

/**
 * Told the SQL of every statement sent to the database, transaction control (begin, commit) included, the
 * connection it runs on and its parameters; what it returns, if anything, is called once the statement has
 * succeeded.
 */
export type StatementObserver = (
  sql: string,
  connection: DatabaseConnection,
  parameters: readonly unknown[],
) => void | (() => void);

/**
 * The dialect, with every statement its connections run reported to `observe`: how tests and benchmarks
 * count the statements and commits a request costs. It sits under everything else (the transaction watch, Kysely's
 * own transactions), so nothing escapes it.
 */
export function observeStatements(dialect: Dialect, observe: StatementObserver): Dialect {
  return withConnectionsRunning(
    dialect,
    (connection) =>
      async <R>(...[query, options]: Parameters<DatabaseConnection['executeQuery']>) => {
        const succeeded = observe(query.sql, connection, query.parameters);
        const result = await connection.executeQuery<R>(query, options);
        succeeded?.();
        return result;
      },
  );
}

/**
 * The dialect, with each connection's statements run by `executeOf(connection)` (which runs them on the
 * connection, around whatever it adds). Connections are wrapped in proxies, one per connection, so a driver
 * comparing connections by identity still sees the same object.
 */
export function withConnectionsRunning(
  dialect: Dialect,
  executeOf: (connection: DatabaseConnection) => DatabaseConnection['executeQuery'],
): Dialect {
  return {
    createDriver: () => wrapDriver(dialect.createDriver(), executeOf),
    createQueryCompiler: () => dialect.createQueryCompiler(),
    createAdapter: () => dialect.createAdapter(),
    createIntrospector: (db) => dialect.createIntrospector(db),
  };
}

function wrapDriver(
  inner: Driver,
  executeOf: (connection: DatabaseConnection) => DatabaseConnection['executeQuery'],
): Driver {
  const wrapped = new WeakMap<DatabaseConnection, DatabaseConnection>();
  const unwrapped = new WeakMap<DatabaseConnection, DatabaseConnection>();
  const wrap = (connection: DatabaseConnection): DatabaseConnection => {
    let proxy = wrapped.get(connection);
    if (!proxy) {
      // What others set on the connection (Kysely's log wraps executeQuery so) stays on the proxy, in front
      // of this one: theirs calls the executeQuery it read before, this one, which calls the real one.
      const overrides = new Map<PropertyKey, unknown>();
      const execute = executeOf(connection);
      proxy = new Proxy(connection, {
        get(target, property) {
          if (overrides.has(property)) return overrides.get(property);
          if (property === 'executeQuery') return execute;
          // Methods run on the real connection: drivers keep private state on it.
          const value: unknown = Reflect.get(target, property, target);
          return typeof value === 'function'
            ? (value as (...args: unknown[]) => unknown).bind(target)
            : value;
        },
        set(_target, property, value) {
          overrides.set(property, value);
          return true;
        },
      });
      wrapped.set(connection, proxy);
      unwrapped.set(proxy, connection);
    }
    return proxy;
  };
  // The inner driver's transaction methods run their statements through the connection they are given,
  // so they get the proxy; the release hands back the real connection.
  return {
    init: () => inner.init(),
    acquireConnection: async () => wrap(await inner.acquireConnection()),
    beginTransaction: (connection, settings) => inner.beginTransaction(connection, settings),
    commitTransaction: (connection) => inner.commitTransaction(connection),
    rollbackTransaction: (connection) => inner.rollbackTransaction(connection),
    ...(inner.savepoint ? { savepoint: inner.savepoint.bind(inner) } : {}),
    ...(inner.rollbackToSavepoint ? { rollbackToSavepoint: inner.rollbackToSavepoint.bind(inner) } : {}),
    ...(inner.releaseSavepoint ? { releaseSavepoint: inner.releaseSavepoint.bind(inner) } : {}),
    releaseConnection: (connection) => inner.releaseConnection(unwrapped.get(connection) ?? connection),
    destroy: () => inner.destroy(),
  };
}
