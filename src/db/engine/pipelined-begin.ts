import type { Writable } from 'node:stream';
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
// of the database's backend. And each query's messages (parse, bind, describe, execute, sync: a socket write
// each, every one a system call that can wake the backend) leave in one write, the BEGIN's with the next
// query's (oneWritePerQuery). COMMIT stays a round trip of its own, sent only once the statements before it
// have answered: a process that dies before then leaves nothing committed (test/send-crash.test.ts).

const BEGIN = /^\s*begin\s*$/i;

/**
 * Runs a pipelining client's `send` of the query `text` with its socket corked, so that what it writes leaves
 * in one write when it is uncorked; a BEGIN's stays corked until the next query has been written behind it
 * (pipelineBegin has nothing wait for the BEGIN's answer, so the next query comes), or until the event loop's
 * next turn at the latest, so that a BEGIN awaited by anyone else still goes out. A pg client in pipeline mode
 * writes a query within its query() call, when connected.
 */
export function oneWritePerQuery(stream: () => Writable | undefined) {
  /** The BEGIN held corked, if one is: which one (a later one is not released by an earlier one's turn). */
  let held: object | undefined;
  return <T>(text: unknown, send: () => T): T => {
    const socket = stream();
    // Not yet made (the client is not connecting): pg queues the query and writes it once connected.
    if (socket === undefined) return send();
    const holdsBegin = held === undefined && typeof text === 'string' && BEGIN.test(text);
    socket.cork();
    try {
      return send();
    } finally {
      if (holdsBegin) {
        const begin = {};
        held = begin;
        setImmediate(() => {
          if (held !== begin) return;
          held = undefined;
          socket.uncork();
        });
      } else {
        if (held !== undefined) socket.uncork();
        held = undefined;
        socket.uncork();
      }
    }
  };
}

/** The dialect, with each connection's BEGIN sent with the statement after it (the client must pipeline). */
export const pipelineBegin = (dialect: Dialect): Dialect =>
  withConnectionsRunning(dialect, (connection) => {
    /** The BEGIN on the wire whose answer the next statement waits for. */
    let begun: Promise<QueryResult<unknown>> | undefined;
    return async <R>(
      ...[query, options]: Parameters<typeof connection.executeQuery>
    ): Promise<QueryResult<R>> => {
      if (begun === undefined && BEGIN.test(query.sql)) {
        begun = connection.executeQuery(query, options);
        // Its failure is the next statement's to report.
        begun.catch(() => undefined);
        return { rows: [] };
      }
      const before = begun;
      begun = undefined;
      // Made now, so sent behind the BEGIN before either answer is read.
      const result = connection.executeQuery<R>(query, options);
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
