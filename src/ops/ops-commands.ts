// The CLI's `backup` and `copy-to`: what the operator typed, handed to the modules that do the work, and
// what happened, told back. The work is in backup.ts and copy-to.ts.
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { Config } from '../config.ts';
import { ENCRYPTION_KEY_FILE } from '../lib/encryption-key.ts';
import { SQLITE_FILE } from '../boot/database.ts';
import type { Output } from '../lib/operator-output.ts';
import { BackupError, backupSqlite } from './backup.ts';
import { copySqliteToPostgres, CopyError, type TableCount } from './copy-to.ts';

interface Io {
  stdout: Output;
  stderr: Output;
}

export async function runBackup(io: Io, config: Config, file: string): Promise<number> {
  if (config.databaseUrl) {
    throw new BackupError(
      'DATABASE_URL is set: PostgreSQL is backed up with pg_dump (docs/operations.md); ' +
        'postwire backup copies the embedded SQLite database.',
    );
  }
  const result = backupSqlite({
    source: path.join(config.dataDir, SQLITE_FILE),
    target: file,
    dataDir: config.dataDir,
    encryptionKey: config.encryptionKey,
  });
  io.stdout.write(`Backed up the database to ${result.file} (${result.bytes} bytes).\n`);
  if (result.keyFile) io.stdout.write(`Copied the encryption key file to ${result.keyFile}.\n`);
  if (result.keyOpensSecrets) io.stdout.write('Checked: the key opens the secrets stored in the backup.\n');
  for (const warning of result.warnings) io.stderr.write(`postwire: ${warning}\n`);
  return result.keyOpensSecrets === false ? 1 : 0;
}

export async function runCopyTo(io: Io, config: Config, url: string): Promise<number> {
  if (!/^postgres(ql)?:\/\//.test(url))
    throw new CopyError(`copy-to takes a postgres://… URL, not '${url}'.`);
  if (config.databaseUrl) {
    throw new CopyError(
      'DATABASE_URL is set, so this installation already uses PostgreSQL; copy-to copies the SQLite ' +
        'database of POSTWIRE_DATA_DIR (unset DATABASE_URL to run it).',
    );
  }
  const result = await copySqliteToPostgres({
    sqlitePath: path.join(config.dataDir, SQLITE_FILE),
    targetUrl: url,
    workerDeadAfterMs: config.workerDeadAfterMs,
    log: (line) => io.stdout.write(`${line}\n`),
  });
  io.stdout.write(countTable(result.tables));
  if (!result.matched) {
    io.stderr.write(
      'postwire: the row counts differ: rows were written to the SQLite database between runs of the copy. ' +
        'Stop every Postwire process and copy again into a new, empty PostgreSQL database.\n',
    );
    return 1;
  }
  io.stdout.write(`All ${result.tables.length} tables have the same row counts: the copy is complete.\n`);
  io.stdout.write(`${keyAdvice(config)}\n`);
  return 0;
}

/** What every process on the copy must be given as its key (never the key itself). */
function keyAdvice(config: Config): string {
  const start = 'Start serve and worker processes with DATABASE_URL set to it and';
  if (config.encryptionKey) return `${start} the same POSTWIRE_ENCRYPTION_KEY.`;
  const keyFile = path.join(config.dataDir, ENCRYPTION_KEY_FILE);
  return existsSync(keyFile)
    ? `${start} POSTWIRE_ENCRYPTION_KEY set to the contents of ${keyFile}: every process must use that key.`
    : `${start} the POSTWIRE_ENCRYPTION_KEY the SQLite installation ran with (there is no key file in ` +
        'its data directory), or, if it never had one, a new key (openssl rand -hex 32): the same everywhere.';
}

function countTable(tables: TableCount[]): string {
  const rows = [
    ['TABLE', 'SQLITE', 'POSTGRESQL', ''],
    ...tables.map((count) => [
      count.table,
      String(count.sqlite),
      String(count.postgres),
      count.sqlite === count.postgres ? '' : 'DIFFERS',
    ]),
  ];
  const widths = [0, 1, 2].map((column) => Math.max(...rows.map((row) => row[column]!.length)));
  return `${rows
    .map((row) =>
      row
        .map((cell, column) => (column < 3 ? cell.padEnd(widths[column]!) : cell))
        .join('  ')
        .trimEnd(),
    )
    .join('\n')}\n`;
}
