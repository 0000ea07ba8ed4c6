import pg from 'pg';
import type { Listener } from '../handle.ts';

// PostgreSQL's LISTEN, over connections of their own (a pooled one would be handed to other queries): the
// queues' wake-ups (`listen`) and the stamps' registry (stamp-registry.ts).

/** A connection's settings for the tables in `schema` (the URL's search_path when none is given). */
export const inSchema = (schema: string | undefined) =>
  schema ? { options: `-c search_path=${schema}` } : {};

const CHANNEL_NAME = /^[a-z_][a-z0-9_]*$/;

export interface ListeningConnection {
  client: pg.Client;
  /** The schema the tables are found in (the one given, or the URL's search_path). */
  schema: string | null;
  /** The connection's backend pid: what PostgreSQL gives as the sender of its NOTIFYs. */
  pid: number;
  close(): Promise<void>;
}

/**
 * A connection listening on `channels`. `onLost` is told once if the connection fails or ends before
 * `close()`; it is then closed, and another may be opened.
 */
export async function connectListening(
  url: string,
  schema: string | undefined,
  channels: readonly string[],
  onMessage: (message: pg.Notification, ownSchema: string | null, client: pg.Client) => void,
  onLost: (error: Error) => void,
): Promise<ListeningConnection> {
  for (const channel of channels)
    if (!CHANNEL_NAME.test(channel)) throw new Error(`Bad channel name '${channel}'.`);
  const client = new pg.Client({
    connectionString: url,
    // Named, so that an operator (or a test) can tell this process's listeners apart in pg_stat_activity.
    application_name: `postwire listen ${channels.join(' ')}${schema ? ` ${schema}` : ''}`,
    ...inSchema(schema),
  });
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await client.end().catch(() => undefined);
  };
  let ownSchema: string | null = null;
  client.on('notification', (message) => {
    if (!closed && channels.includes(message.channel)) onMessage(message, ownSchema, client);
  });
  client.on('error', (error) => {
    if (closed) return;
    void close();
    onLost(error);
  });
  client.on('end', () => {
    if (closed) return;
    closed = true;
    onLost(new Error('The LISTEN connection ended.'));
  });
  try {
    await client.connect();
    const result = await client.query<{ schema: string | null; pid: number }>(
      'select current_schema() as schema, pg_backend_pid() as pid',
    );
    ownSchema = result.rows[0]?.schema ?? null;
    for (const channel of channels) await client.query(`LISTEN ${channel}`);
    return { client, schema: ownSchema, pid: result.rows[0]!.pid, close };
  } catch (error) {
    await close();
    throw error;
  }
}

/**
 * Channels are shared by the whole database, and Postwire's tables live in one schema: the notifications
 * carry the schema they come from (notifyStatement, the stamps' trigger), and those of other schemas (another
 * deployment in the same database) are ignored. One without a schema (sent by an older version) is heard.
 */
export async function listenPostgres(
  url: string,
  schema: string | undefined,
  channel: string,
  onNotify: () => void,
  onError: (error: Error) => void,
): Promise<Listener> {
  const connection = await connectListening(
    url,
    schema,
    [channel],
    (message, ownSchema) => {
      if (message.payload && ownSchema !== null && message.payload !== ownSchema) return;
      onNotify();
    },
    onError,
  );
  return { close: connection.close };
}
