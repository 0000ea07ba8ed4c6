// The bare side of bench/receiving.ts, in a process of its own: an smtp-server that only stores the bytes.
// Every recipient is accepted; each message's stream is collected into one Buffer and written with one INSERT
// (envelope and bytes) into a node:sqlite table before the 250, with the pragmas Postwire's SQLite engine
// uses (WAL, synchronous NORMAL): the floor under a listener that keeps every message before it answers.
//
//   node bench/receiving-bare.ts <sqlite file>   (forked by bench/receiving.ts, which talks to it over IPC)
import { DatabaseSync } from 'node:sqlite';
import { SMTPServer } from 'smtp-server';

const file = process.argv[2]!;
const db = new DatabaseSync(file);
db.exec('PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 5000; PRAGMA synchronous = NORMAL;');
db.exec(
  'CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY, mail_from TEXT NOT NULL, ' +
    'rcpt_to TEXT NOT NULL, raw BLOB NOT NULL, received_at INTEGER NOT NULL)',
);
const insert = db.prepare('INSERT INTO messages (mail_from, rcpt_to, raw, received_at) VALUES (?, ?, ?, ?)');

let stored = 0;
const send = (message: object) => process.send!(message);

const server = new SMTPServer({
  logger: false,
  authOptional: true,
  disabledCommands: ['AUTH', 'STARTTLS'],
  closeTimeout: 100,
  size: 10 * 1024 * 1024,
  onData(stream, session, callback) {
    const chunks: Buffer[] = [];
    stream.on('data', (chunk: Buffer) => chunks.push(chunk));
    stream.on('end', () => {
      insert.run(
        session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
        session.envelope.rcptTo.map((rcpt) => rcpt.address).join(','),
        Buffer.concat(chunks),
        Date.now(),
      );
      stored += 1;
      callback(null, 'Ok: stored');
    });
  },
});

server.listen(0, '127.0.0.1', () => {
  const address = server.server.address();
  send({ type: 'ready', port: typeof address === 'object' && address ? address.port : 0 });
});

// The parent went away (finished or gave up): nothing is left to serve.
process.on('disconnect', () => process.exit(0));

process.on('message', (message: { type: string }) => {
  if (message.type === 'count') {
    send({
      type: 'count',
      stored,
      rows: (db.prepare('SELECT count(*) AS n FROM messages').get() as { n: number }).n,
    });
  } else if (message.type === 'stop') {
    server.close(() => {
      db.close();
      process.exit(0);
    });
  }
});
