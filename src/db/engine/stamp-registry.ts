import { randomBytes } from 'node:crypto';
import { CompiledQuery, type Kysely } from 'kysely';
import type pg from 'pg';
import type { Database } from '../schema.ts';
import type { StampListeners } from '../validated-cache.ts';
import { connectListening, type ListeningConnection } from './postgres-listen.ts';

// PostgreSQL: the processes that hear of every cached write, so that a stamp read may vouch for a long lease
// (validated-cache.ts) while a write's answer waits a round trip, not that lease.
//
// A process that joins listens on the stamps' channel (migration 0017's trigger notifies it in every cached
// write's transaction), then registers (migration 0048): a row with its listening connection's backend pid,
// renewed every few seconds, expiring in the database's time. Its reads vouch only while it is registered
// without a break since before they were issued, and only until half the row's life after its last renewal
// was sent: a process whose renewals stop has stopped vouching long before its row expires, and one whose
// listener is lost stops at once, until it has listened and registered again.
//
// A writer, once its commit is done and before it answers, announces it: one statement that NOTIFYs the
// stamps' channel with a token of its own and reads the pids of the registered processes. Each process's
// listener, given the token after the trigger's notification of the commit (PostgreSQL delivers them in
// commit order), drops what it vouched for (`heard`) and only then acknowledges: a NOTIFY of the token on
// the acknowledgements' channel from that same connection. PostgreSQL gives each notification its sender's
// pid, so the writer knows whose acknowledgement came, and that it came from the connection that heard the
// token, not from a pooled one that heard nothing. The writer answers once every pid it read has
// acknowledged, or when its lease is over (validated-cache.ts), whichever comes first: a process whose
// listener is stuck or whose event loop is held costs that write its lease, as every write did before, and
// its own reads have run out by then. Acknowledging by an UPDATE instead would have the writer poll for it,
// and write a row per process per cached write.
//
// The guarantee against each kind of process: a registered one has heard the write when it acknowledges, or
// its reads made before the commit have run out when the lease has; one not registered when the writer reads
// the registry vouches only for reads issued after its registration commits, which is after the writer's
// commit, so they see it.

/** The stamps' trigger's channel (migration 0017); a writer's announcement adds its token to the schema. */
const STAMP_CHANNEL = 'postwire_cache_stamps';
/** Where each process acknowledges a writer's token, from its listening connection. */
const ACK_CHANNEL = 'postwire_cache_acks';
/** A registration's life in the database's time, from its latest renewal. */
const REGISTRATION_TTL_MS = 10_000;
const RENEW_EVERY_MS = 2_000;
/**
 * How long after a renewal was sent this process vouches for its reads: half the row's life, so that it
 * stops well before the row expires (and writers stop waiting for it), even if the database's clock runs
 * a little fast.
 */
const VOUCH_AFTER_RENEWAL_MS = REGISTRATION_TTL_MS / 2;
/** The next attempt after a lost listener or a failed renewal. */
const RETRY_MS = 1_000;

const REGISTER = `
  insert into stamp_listeners (id, listener_pid, expires_at)
  values ($1, pg_backend_pid(), clock_timestamp() + $2::integer * interval '1 millisecond')
  on conflict (id) do update set listener_pid = excluded.listener_pid, expires_at = excluded.expires_at`;
/** Rows left by processes that stopped without closing: no writer waits for them any more. */
const PRUNE = 'delete from stamp_listeners where expires_at < clock_timestamp()';
const ANNOUNCE = `
  select
    array(select listener_pid from stamp_listeners where expires_at > clock_timestamp() and id <> $2) as pids,
    pg_notify('${STAMP_CHANNEL}', current_schema() || ' ' || $1)`;

export interface StampRegistry extends StampListeners {
  /**
   * Listens and registers, and keeps the registration renewed (listening and registering again after a
   * lost connection) until `close()`. Needs migration 0048.
   */
  join(): Promise<void>;
  /** Leaves the registry (writers stop waiting for this process) and closes the listener. */
  close(): Promise<void>;
}

export interface StampRegistryOptions {
  url: string;
  schema: string | undefined;
  /** Where writes are announced from (the process's pool). */
  db: Kysely<Database>;
  /** The stamps' monotonic clock, in milliseconds. */
  now: () => number;
  /** A cached write was committed somewhere: what this process's reads vouched for may be stale. */
  heard: () => void;
}

interface Waiter {
  acknowledgedBy(pid: number): void;
}

export function createStampRegistry(options: StampRegistryOptions): StampRegistry {
  const { url, schema, db, now, heard } = options;
  const id = `proc_${randomBytes(12).toString('hex')}`;
  /** This process's announcements' tokens: its id and a count. */
  const ownTokens = `${id}.`;
  let announced = 0;
  let connection: ListeningConnection | undefined;
  let connecting: Promise<ListeningConnection> | undefined;
  let joined = false;
  let closed = false;
  /** Since when (this process's clock, at its registration's answer) it has been registered without a break. */
  let registeredSince: number | undefined;
  let vouchUntil = -Infinity;
  let timer: NodeJS.Timeout | undefined;
  /** The announcements this process waits on, by token. */
  const waiters = new Map<string, Waiter>();

  const onMessage = (message: pg.Notification, ownSchema: string | null, client: pg.Client) => {
    if (message.channel === ACK_CHANNEL) {
      waiters.get(message.payload ?? '')?.acknowledgedBy(message.processId);
      return;
    }
    const [from, token] = (message.payload ?? '').split(' ');
    if (from && ownSchema !== null && from !== ownSchema) return;
    // First forget, then say so: the acknowledgement must not leave before this process stops vouching.
    heard();
    // Not its own: this process stopped vouching for its reads when it committed.
    if (token && !token.startsWith(ownTokens))
      client.query('select pg_notify($1, $2)', [ACK_CHANNEL, token]).catch(() => undefined);
  };

  const listening = (): Promise<ListeningConnection> => {
    if (connection) return Promise.resolve(connection);
    if (closed) return Promise.reject(new Error('The stamp registry is closed.'));
    if (connecting) return connecting;
    let opened: ListeningConnection | undefined;
    let lostWhileOpening = false;
    const lost = () => {
      if (!opened) lostWhileOpening = true;
      if (!opened || connection !== opened) return;
      connection = undefined;
      registeredSince = undefined;
      if (joined && !closed) schedule(0);
    };
    connecting = connectListening(url, schema, [STAMP_CHANNEL, ACK_CHANNEL], onMessage, lost).then(
      async (listener) => {
        connecting = undefined;
        if (closed || lostWhileOpening) {
          await listener.close();
          throw new Error(closed ? 'The stamp registry is closed.' : 'The LISTEN connection was lost.');
        }
        connection = opened = listener;
        return listener;
      },
      (error: unknown) => {
        connecting = undefined;
        throw error;
      },
    );
    return connecting;
  };

  /** Registers or renews, from the listening connection (a renewal that passes shows it is alive). */
  const register = async () => {
    const listener = await listening();
    const sentAt = now();
    await listener.client.query(REGISTER, [id, REGISTRATION_TTL_MS]);
    const answeredAt = now();
    if (connection !== listener || closed) return;
    // A registration that lapsed (or never was) vouches only for reads issued after it is committed.
    if (registeredSince === undefined || answeredAt >= vouchUntil) registeredSince = answeredAt;
    vouchUntil = sentAt + VOUCH_AFTER_RENEWAL_MS;
  };

  function schedule(delayMs: number) {
    clearTimeout(timer);
    timer = setTimeout(() => {
      register().then(
        () => schedule(RENEW_EVERY_MS),
        () => {
          if (joined && !closed) schedule(RETRY_MS);
        },
      );
    }, delayMs);
    timer.unref();
  }

  return {
    vouchingSince: () => (registeredSince !== undefined && now() < vouchUntil ? registeredSince : undefined),

    async acknowledged(signal) {
      // Listening before announcing: the acknowledgements may come before the announcement's answer.
      await listening();
      const token = `${ownTokens}${++announced}`;
      let resolve!: () => void;
      const all = new Promise<void>((done) => (resolve = done));
      /** Acknowledgements that came before the registry's answer said whose to wait for. */
      const early = new Set<number>();
      let awaited: Set<number> | undefined;
      waiters.set(token, {
        acknowledgedBy(pid) {
          if (!awaited) return void early.add(pid);
          awaited.delete(pid);
          if (awaited.size === 0) resolve();
        },
      });
      signal.addEventListener('abort', resolve);
      try {
        const { rows } = await db.executeQuery<{ pids: number[] }>(CompiledQuery.raw(ANNOUNCE, [token, id]));
        awaited = new Set(rows[0]!.pids.filter((pid) => !early.has(pid)));
        if (awaited.size === 0) resolve();
        await all;
      } finally {
        waiters.delete(token);
        signal.removeEventListener('abort', resolve);
      }
    },

    async join() {
      joined = true;
      const listener = await listening();
      await listener.client.query(PRUNE);
      await register();
      schedule(RENEW_EVERY_MS);
    },

    async close() {
      closed = true;
      clearTimeout(timer);
      registeredSince = undefined;
      const listener = connection ?? (await connecting?.catch(() => undefined));
      connection = undefined;
      if (!listener) return;
      if (joined)
        await listener.client.query('delete from stamp_listeners where id = $1', [id]).catch(() => {});
      await listener.close();
    },
  };
}
