import type { SMTPServer, SMTPServerSession } from 'smtp-server';
import { smtpError } from './smtp-data.ts';

// What the two SMTP servers (the inbound listener and the submission server) share about who may hold a
// connection, and for how long: one client address holds a few sessions at most, and a session ends at its time
// limit whatever it is doing (a client that trickles a byte every few seconds never trips the idle timeout).

export interface SessionBoundsOptions {
  /** Sessions one client address may hold at once; the next is refused with a 421. */
  maxPerClient: number;
  /** A session still open this long is ended with a 421. */
  sessionTimeoutMs: number;
  /** The servers whose connections are bounded together (the submission server listens on two ports). */
  servers(): Iterable<SMTPServer>;
  /** The name the 421 gives (the greeting's). */
  hostname: string;
  /** Told of each session ended at its time limit (for the log). */
  ended(session: SMTPServerSession): void;
}

export interface SessionBounds {
  /** For onConnect: admits the session, or refuses it (421) when its address holds its share already. */
  admit(session: SMTPServerSession, callback: (error?: Error | null) => void): void;
  /** For onClose: the session no longer counts, and its time limit is dropped. */
  release(session: SMTPServerSession): void;
}

export function createSessionBounds(options: SessionBoundsOptions): SessionBounds {
  // Sessions admitted (admit said yes), until release: their address, for the per-address count, and the timer
  // of their time limit. A connection refused, or closed before it was greeted, is in neither.
  const admitted = new Map<SMTPServerSession, { address: string; limit: NodeJS.Timeout }>();
  const openPerAddress = new Map<string, number>();
  const end = (session: SMTPServerSession) => {
    for (const server of options.servers()) {
      for (const connection of server.connections) {
        if (connection.session !== session) continue;
        options.ended(session);
        // A 421 closes the connection (smtp-server ends it, and destroys it if the client does not close its side).
        connection.send(421, `${options.hostname} Session time limit reached, closing`);
      }
    }
  };
  return {
    admit(session, callback) {
      const address = session.remoteAddress ?? '';
      const open = openPerAddress.get(address) ?? 0;
      if (open >= options.maxPerClient) {
        callback(smtpError(421, '4.7.0 Too many connections from your address; try again later'));
        return;
      }
      openPerAddress.set(address, open + 1);
      const limit = setTimeout(() => end(session), options.sessionTimeoutMs);
      limit.unref();
      admitted.set(session, { address, limit });
      callback();
    },
    release(session) {
      const entry = admitted.get(session);
      if (!entry) return;
      admitted.delete(session);
      clearTimeout(entry.limit);
      const left = (openPerAddress.get(entry.address) ?? 1) - 1;
      if (left > 0) openPerAddress.set(entry.address, left);
      else openPerAddress.delete(entry.address);
    },
  };
}
