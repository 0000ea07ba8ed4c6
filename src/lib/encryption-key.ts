import { randomBytes } from 'node:crypto';
import { chmodSync, linkSync, mkdirSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export const ENCRYPTION_KEY_FILE = 'encryption.key';

export interface EncryptionKey {
  key: Buffer;
  /** Where the key came from: POSTWIRE_ENCRYPTION_KEY, or the key file in the data directory. */
  source: 'config' | 'file';
  /** The key file, when the key came from one. */
  file?: string;
  /** True when this call generated the key file. */
  created: boolean;
  /** Things an operator should hear about (never the key itself). */
  warnings: string[];
}

/**
 * The key that seals webhook secrets: POSTWIRE_ENCRYPTION_KEY when set, else the 32-byte key file
 * `encryption.key` in the data directory, generated on first use. The file holds the key as 64 hex digits,
 * the same form POSTWIRE_ENCRYPTION_KEY accepts, so an operator can move it into the environment.
 */
export function loadOrCreateEncryptionKey(config: {
  encryptionKey: Buffer | undefined;
  dataDir: string;
}): EncryptionKey {
  if (config.encryptionKey)
    return { key: config.encryptionKey, source: 'config', created: false, warnings: [] };

  const file = path.join(config.dataDir, ENCRYPTION_KEY_FILE);
  const existing = readKeyFile(file);
  if (existing)
    return { key: existing, source: 'file', file, created: false, warnings: permissionWarnings(file) };

  mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  const key = randomBytes(32);
  // Written to a private temporary file and then hard-linked into place: link() fails when the name exists,
  // so two processes starting at once never overwrite each other's key (the loser reads the winner's), and
  // nobody ever reads a half-written file.
  const temporary = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  writeFileSync(temporary, `${key.toString('hex')}\n`, { mode: 0o600, flag: 'wx' });
  chmodSync(temporary, 0o600); // the mode given to writeFileSync is narrowed by the umask, never widened
  try {
    linkSync(temporary, file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    const winner = readKeyFile(file);
    if (!winner) throw new Error(`The encryption key file ${file} appeared but could not be read.`);
    return { key: winner, source: 'file', file, created: false, warnings: [] };
  } finally {
    unlinkSync(temporary);
  }
  return { key, source: 'file', file, created: true, warnings: [] };
}

function readKeyFile(file: string): Buffer | undefined {
  let text: string;
  try {
    text = readFileSync(file, 'utf8').trim();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
  // A damaged key file is never replaced: a new key would make every stored secret unreadable.
  if (!/^[0-9a-fA-F]{64}$/.test(text)) {
    throw new Error(
      `The encryption key file ${file} does not hold a 32-byte key as 64 hex digits. ` +
        'Restore it from a backup, or set POSTWIRE_ENCRYPTION_KEY.',
    );
  }
  return Buffer.from(text, 'hex');
}

function permissionWarnings(file: string): string[] {
  if (process.platform === 'win32') return [];
  const mode = statSync(file).mode & 0o777;
  return mode & 0o077
    ? [`The encryption key file ${file} is readable by others (mode ${mode.toString(8)}); chmod 600 it.`]
    : [];
}
