// A sending worker as its own process, configured from the environment like the server (DATABASE_URL or
// POSTWIRE_DATA_DIR, SMTP_URL, SEND_*). Prints `ready` once it runs; the crash test kills it with SIGKILL.
import { loadConfig } from '../../src/config.ts';
import { systemClock } from '../../src/lib/clock.ts';
import { createNotifier } from '../../src/lib/notifier.ts';
import { createEventService } from '../../src/modules/events/events.service.ts';
import { createSendingWorker, sendingSettingsFromConfig } from '../../src/modules/sending/sending.worker.ts';
import { createTransportFromConfig } from '../../src/modules/sending/transports/from-config.ts';
import { openConfiguredDatabase } from '../../src/server.ts';

const config = loadConfig();
const database = await openConfiguredDatabase(config);
const events = createEventService({
  db: database.db,
  engine: database.engine,
  clock: systemClock,
  notifier: createNotifier(),
});
const worker = createSendingWorker({
  database,
  clock: systemClock,
  events,
  transport: createTransportFromConfig(config),
  settings: { ...sendingSettingsFromConfig(config), pollIntervalMs: 100 },
  logger: {
    info: () => {},
    warn: (object, message) => process.stderr.write(`${message} ${JSON.stringify(object)}\n`),
    error: (object, message) =>
      process.stderr.write(`${message} ${String((object as { err?: unknown }).err)}\n`),
  },
});
await worker.start();
process.stdout.write('ready\n');
process.on('SIGTERM', () => {
  void worker
    .stop()
    .then(() => database.close())
    .then(() => process.exit(0));
});
