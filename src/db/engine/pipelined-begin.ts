import type { Dialect, QueryResult } from 'kysely';
import { withConnectionsRunning } from '../statement-observer.ts';

// PostgreSQL: a transaction's BEGIN goes out with its first statement, not a round trip ahead of it.
//
// On a pg client in pipeline mode (`pipeline: true`) a query is written to the socket as soon as it is made,
// without waiting for the answer to the one before; the answers come back in order. Nothing waits for what
// BEGIN answers, so it is answered here at once: the BEGIN is on the wire, the transaction's first statement
// (or its COMMIT or ROLLBACK) follows it there, and that statement's result waits for both (an error of the
// BEGIN is that statement's error). The transaction is the same one, statement for statement; what goes is a
// round trip per transaction (a send group's, an outcome batch's), and with it a wake-up of this process and
// of the database's backend. COMMIT stays a round trip of its own, sent only once the statements before it
// have answered: a process that dies before then leaves nothing committed (test/send-crash.test.ts).

const BEGIN = /^\s*begin\s*$/i;

/** The dialect, with each connection's BEGIN sent with the statement after it (the client must pipeline). */
export const pipelineBegin = (dialect: Dialect): Dialect =>
  withConnectionsRunning(dialect, (connection) => {
    /** The BEGIN on the wire whose answer the next statement waits for. */
    let begun: Promise<QueryResult<unknown>> | undefined;
    return async <R>(query: Parameters<typeof connection.executeQuery>[0]): Promise<QueryResult<R>> => {
      if (begun === undefined && BEGIN.test(query.sql)) {
        begun = connection.executeQuery(query);
        // Its failure is the next statement's to report.
        begun.catch(() => undefined);
        return { rows: [] };
      }
      const before = begun;
      begun = undefined;
      // Made now, so sent behind the BEGIN before either answer is read.
      const result = connection.executeQuery<R>(query);
      if (before) {
        try {
          await before;
        } catch (error) {
          await result.catch(() => undefined);
          throw error;
        }
      }
      return result;
    };
  });
