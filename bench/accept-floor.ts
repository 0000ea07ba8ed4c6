// The floor under an accepted send on SQLite: the CPU per email of the statements alone, on node:sqlite
// with no HTTP, no validation, no Kysely and no unit of work. The same rows as `POST /v1/emails` writes
// (the email with the bench's body, one recipient queued with its fair position, the daily count), the same
// schema and indexes (the real migrations), the suppressions read, statements prepared once and run in one
// transaction per group of emails, as send groups write them (src/modules/emails/send-groups.ts).
//
//   npm run bench:accept-floor                 # groups of 1, 5, 10 and 50 emails
//   npm run bench:accept-floor -- --emails 20000
//
// bench:api's "server µs/req" of POST /v1/emails minus this is what the rest of a request costs.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { parseArgs } from 'node:util';
import { openDatabase } from '../src/db/connection.ts';
import { migrateToLatest } from '../src/db/migrate.ts';
import { placeholders } from '../src/db/sql-text.ts';
import { systemClock } from '../src/lib/clock.ts';
import { newId } from '../src/lib/ids.ts';
import { nextPositionText } from '../src/modules/emails/fair-queue.repo.ts';
import { createProjectRepo } from '../src/modules/projects/projects.repo.ts';
import { createProjectService } from '../src/modules/projects/projects.service.ts';
import { emailMessage } from './shared.ts';

const { values: args } = parseArgs({
  options: { emails: { type: 'string', default: '10000' }, groups: { type: 'string', default: '1,5,10,50' } },
});
const EMAILS = Number(args.emails);
const GROUP_SIZES = args.groups.split(',').map(Number);

const dir = mkdtempSync(path.join(tmpdir(), 'postwire-floor-'));
const file = path.join(dir, 'postwire.db');
const setup = await openDatabase({ sqlitePath: file });
await migrateToLatest(setup.db);
const projects = createProjectService({
  db: setup.db,
  repo: createProjectRepo(setup.db),
  clock: systemClock,
});
const projectId = (await projects.createProject('Floor')).id;
await setup.close();

// As src/db/engine/sqlite.ts opens it.
const sqlite = new DatabaseSync(file);
sqlite.exec('PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 5000; PRAGMA synchronous = NORMAL;');
sqlite.exec('PRAGMA foreign_keys = ON;');

const EMAIL_COLUMNS =
  'id, project_id, from_address, to_addresses, cc_addresses, bcc_addresses, reply_to, subject, html, text, ' +
  'headers, tags, template_id, template_version, message_id, dkim_domain, return_path_domain, status, ' +
  'recipient_count, scheduled_at, created_at, updated_at';
const RECIPIENT_COLUMNS =
  'id, email_id, project_id, position, type, address, host, created_at, updated_at, status, ready_seq, ' +
  'wait_until, next_attempt_at, completed_at';

function statementsFor(size: number) {
  const slot = placeholders('sqlite');
  const list = (count: number) => Array.from({ length: count }, slot).join(', ');
  const repeat = (row: () => string) => Array.from({ length: size }, row).join(', ');
  return {
    suppressions: sqlite.prepare(
      `SELECT * FROM suppressions WHERE project_id IN (?) AND address IN (${list(size)})`,
    ),
    emails: sqlite.prepare(`INSERT INTO emails (${EMAIL_COLUMNS}) VALUES ${repeat(() => `(${list(22)})`)}`),
    recipients: sqlite.prepare(
      `INSERT INTO email_recipients (${RECIPIENT_COLUMNS}) VALUES ${repeat(
        () => `(${list(10)}, ${nextPositionText('sqlite', slot)}, ${list(3)})`,
      )}`,
    ),
    quota: sqlite.prepare(
      `INSERT INTO send_quota (project_id, day, shard, used) VALUES (?, ?, ?, ?)
       ON CONFLICT (project_id, day, shard) DO UPDATE SET used = send_quota.used + excluded.used`,
    ),
  };
}

const begin = sqlite.prepare('BEGIN IMMEDIATE');
const commit = sqlite.prepare('COMMIT');
const body = emailMessage(1);

/** CPU µs per email, writing `EMAILS` emails in groups of `size`. */
function measure(size: number): number {
  const statements = statementsFor(size);
  const groups = Math.ceil(EMAILS / size);
  const started = process.cpuUsage();
  for (let group = 0; group < groups; group++) {
    const now = new Date().toISOString();
    const emails: unknown[] = [];
    const recipients: unknown[] = [];
    const addresses: string[] = [];
    for (let i = 0; i < size; i++) {
      const id = newId('msg');
      const address = `user${group * size + i}@example.org`;
      addresses.push(address);
      emails.push(
        id,
        projectId,
        body.from,
        JSON.stringify([address]),
        '[]',
        '[]',
        '[]',
        body.subject,
        body.html,
        body.text,
        '{}',
        '{}',
        null,
        null,
        `<${id}@example.com>`,
        null,
        null,
        'queued',
        1,
        null,
        now,
        now,
      );
      recipients.push(
        newId('rcpt'),
        id,
        projectId,
        0,
        'to',
        address,
        'example.org',
        now,
        now,
        'queued',
        projectId,
        i + 1,
        null,
        now,
        null,
      );
    }
    begin.run();
    statements.suppressions.all(projectId, ...addresses);
    statements.emails.run(...(emails as never[]));
    statements.recipients.run(...(recipients as never[]));
    statements.quota.run(projectId, now.slice(0, 10), group % 8, size);
    commit.run();
  }
  const used = process.cpuUsage(started);
  return (used.user + used.system) / (groups * size);
}

console.log(
  `node ${process.version}: ${EMAILS} emails per group size, SQLite (WAL, synchronous NORMAL), statements prepared`,
);
// A first pass warms the file and the code; the figures are from the second.
for (const size of GROUP_SIZES) measure(size);
for (const size of GROUP_SIZES) {
  console.log(
    `group of ${String(size).padStart(3)}: ${measure(size).toFixed(1).padStart(6)} µs of CPU per email`,
  );
}
sqlite.close();
rmSync(dir, { recursive: true, force: true });
