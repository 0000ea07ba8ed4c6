// The checkpoint thread of a process's SQLite database (sqlite-checkpoints.ts says why): a connection of its
// own that runs a PASSIVE checkpoint every interval until it is asked to stop.
import { DatabaseSync } from 'node:sqlite';
import { parentPort, workerData } from 'node:worker_threads';

const { file, busyTimeoutMs, intervalMs } = workerData as {
  file: string;
  busyTimeoutMs: number;
  intervalMs: number;
};
const db = new DatabaseSync(file);
db.exec(`PRAGMA busy_timeout = ${busyTimeoutMs};`);
const checkpoint = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');
const timer = setInterval(() => {
  try {
    checkpoint.get();
  } catch {
    // Busy or closing: the next interval tries again.
  }
}, intervalMs);
parentPort!.on('message', (message) => {
  if (message !== 'stop') return;
  clearInterval(timer);
  db.close();
  parentPort!.close();
});
