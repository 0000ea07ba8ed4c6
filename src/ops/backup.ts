// `postwire backup FILE`: a consistent copy of the embedded SQLite database, taken while the service runs,
// with what opening it needs (the key that seals webhook secrets and DKIM keys).
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  existsSync,
  fsyncSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { SQLITE_BUSY_TIMEOUT_MS } from '../db/engine/sqlite.ts';
import { createSecretBox } from '../lib/crypto.ts';
import { ENCRYPTION_KEY_FILE } from '../lib/encryption-key.ts';

/** Where the key file of a backup goes: next to it, so that the two travel together. */
export const backupKeyFile = (backupFile: string): string => `${backupFile}.key`;

export interface BackupRequest {
  /** The live database file (postwire.db in the data directory). */
  source: string;
  /** Where the copy goes; must not exist yet. */
  target: string;
  /** The data directory, where the key file lives when POSTWIRE_ENCRYPTION_KEY is unset. */
  dataDir: string;
  /** POSTWIRE_ENCRYPTION_KEY, when set: then no key file is written and the operator is told to keep it. */
  encryptionKey: Buffer | undefined;
}

export interface BackupResult {
  file: string;
  bytes: number;
  /** Where the key file was copied, when the key lives in one. */
  keyFile: string | undefined;
  /** Whether the key (copied or in the environment) opened a sealed secret of the copy; undefined: none stored. */
  keyOpensSecrets: boolean | undefined;
  /** Things the operator must hear about (never the key itself). */
  warnings: string[];
}

/**
 * A mistake the operator can fix (an existing target, a missing folder, no database): the CLI prints the message
 * alone.
 */
export class BackupError extends Error {}

/**
 * Copies the database with VACUUM INTO: one read transaction, so the copy is the database as of one commit,
 * taken while the service keeps writing (WAL mode lets readers and one writer proceed together), and it
 * holds only what is live (no free pages, no WAL to carry along). The online backup API was the other
 * choice: it copies page by page and starts over whenever another process writes meanwhile, so a busy
 * service could keep it from ever finishing.
 *
 * The copy is written to a temporary name and renamed into place once complete and checked, so that a
 * file at `target` is always a whole backup. It is readable by its owner only: it holds key hashes and
 * sealed secrets.
 */
export function backupSqlite(request: BackupRequest): BackupResult {
  const { source, target } = request;
  if (!existsSync(source)) {
    throw new BackupError(
      `there is no SQLite database at ${source} (POSTWIRE_DATA_DIR); nothing to back up. ` +
        'With DATABASE_URL set, back up PostgreSQL with pg_dump (docs/operations.md).',
    );
  }
  // Checked here, not left to the first write: that would fail on the temporary file's name (ENOENT … .partial),
  // which names neither the folder nor what to do.
  const folder = path.dirname(path.resolve(target));
  if (!existsSync(folder)) {
    throw new BackupError(
      `the folder ${folder} does not exist; create it first (a backup makes no folders).`,
    );
  }
  if (!statSync(folder).isDirectory()) throw new BackupError(`${folder} is not a folder.`);
  const keyTarget = backupKeyFile(target);
  for (const file of [target, keyTarget]) {
    if (existsSync(file)) throw new BackupError(`${file} already exists; a backup never overwrites a file.`);
  }

  const temporary = path.join(folder, `.${path.basename(target)}.${randomBytes(4).toString('hex')}.partial`);
  try {
    // VACUUM INTO writes into an empty file that exists: created here so that its mode is private from the start.
    closeSync(openSync(temporary, 'wx', 0o600));
    const live = new DatabaseSync(source);
    try {
      live.exec(`PRAGMA busy_timeout = ${SQLITE_BUSY_TIMEOUT_MS}`);
      live.prepare('VACUUM INTO ?').run(temporary);
    } finally {
      live.close();
    }
    const sealed = checkCopy(temporary);
    syncFile(temporary);

    const warnings: string[] = [];
    let key = request.encryptionKey;
    let keyFile: string | undefined;
    if (key) {
      warnings.push(
        'The encryption key is set in POSTWIRE_ENCRYPTION_KEY, so it is not in the backup: keep that value ' +
          'safe beside the backup (not in the same place); without it the webhook secrets and domain keys in ' +
          'the backup cannot be opened.',
      );
    } else {
      const liveKeyFile = path.join(request.dataDir, ENCRYPTION_KEY_FILE);
      if (existsSync(liveKeyFile)) {
        key = Buffer.from(readFileSync(liveKeyFile, 'utf8').trim(), 'hex');
        writePrivateFile(keyTarget, readFileSync(liveKeyFile));
        keyFile = keyTarget;
      } else if (sealed !== undefined) {
        warnings.push(
          `There is no key file ${liveKeyFile} and POSTWIRE_ENCRYPTION_KEY is unset, but the database holds sealed ` +
            'secrets: the backup cannot open them until the original key is found.',
        );
      }
    }
    const keyOpensSecrets = sealed === undefined || !key ? undefined : opens(key, sealed);
    if (keyOpensSecrets === false) {
      warnings.push(
        'The encryption key does not open the secrets stored in the database: it is not the key they were ' +
          'sealed with, so a restore with it would not sign webhooks or mail. Find the original key.',
      );
    }

    renameSync(temporary, target);
    syncDirectory(folder);
    return { file: target, bytes: statSync(target).size, keyFile, keyOpensSecrets, warnings };
  } finally {
    if (existsSync(temporary)) unlinkSync(temporary);
  }
}

/**
 * Opens the copy and checks that SQLite finds it sound and that it is a Postwire database; returns one of
 * its sealed values (a webhook secret or a DKIM key) to try the key on, if it stores any.
 */
function checkCopy(file: string): string | undefined {
  const copy = new DatabaseSync(file, { readOnly: true });
  try {
    const check = copy.prepare('PRAGMA quick_check').all() as Array<{ quick_check: string }>;
    if (check.length !== 1 || check[0]!.quick_check !== 'ok') {
      throw new Error(`the copy failed SQLite's check: ${check.map((row) => row.quick_check).join('; ')}`);
    }
    const tables = new Set(
      (
        copy.prepare("select name from sqlite_master where type = 'table'").all() as Array<{ name: string }>
      ).map((row) => row.name),
    );
    if (!tables.has('postwire_migrations')) throw new BackupError('the file is not a Postwire database.');
    // The canary first: every database a process has started on holds it, secrets or not.
    const sealedSamples = [
      ['encryption_canary', 'sealed'],
      ['webhooks', 'secret_sealed'],
      ['domains', 'dkim_private_key_sealed'],
    ] as const;
    for (const [table, column] of sealedSamples) {
      if (!tables.has(table)) continue;
      const row = copy
        .prepare(`select ${column} as sealed from ${table} where ${column} is not null limit 1`)
        .get() as { sealed: string } | undefined;
      if (row) return row.sealed;
    }
    return undefined;
  } finally {
    copy.close();
  }
}

function opens(key: Buffer, sealed: string): boolean {
  try {
    createSecretBox(key).open(sealed);
    return true;
  } catch {
    return false;
  }
}

/** Written under a temporary name, synced and renamed: a key file is whole or absent, never half written. */
function writePrivateFile(file: string, content: Buffer): void {
  const temporary = `${file}.${randomBytes(4).toString('hex')}.partial`;
  writeFileSync(temporary, content, { mode: 0o600, flag: 'wx' });
  chmodSync(temporary, 0o600); // the mode given to writeFileSync is narrowed by the umask, never widened
  syncFile(temporary);
  renameSync(temporary, file);
}

function syncFile(file: string): void {
  const descriptor = openSync(file, 'r+');
  try {
    fsyncSync(descriptor);
  } finally {
    closeSync(descriptor);
  }
}

/** A rename is durable once its directory is synced (not possible on Windows, where it is not needed). */
function syncDirectory(directory: string): void {
  if (process.platform === 'win32') return;
  const descriptor = openSync(directory, 'r');
  try {
    fsyncSync(descriptor);
  } finally {
    closeSync(descriptor);
  }
}
