// The encryption key a process starts with, checked against the database's canary before it works.
import { rmSync } from 'node:fs';
import type { Kysely } from 'kysely';
import type { Config } from '../config.ts';
import { createEncryptionCanaryRepo } from '../db/encryption-canary.repo.ts';
import type { Database } from '../db/schema.ts';
import type { Clock } from '../lib/clock.ts';
import { createSecretBox, type SecretBox } from '../lib/crypto.ts';
import {
  createEncryptionKeyFile,
  type EncryptionKey,
  encryptionKeyFile,
  readEncryptionKey,
} from '../lib/encryption-key.ts';

/** What the first process seals into the encryption canary; any value would do, a fixed one reads clearly. */
const CANARY_PLAINTEXT = 'postwire encryption canary';

/**
 * The encryption key, once it is known to be the database's: the database records a value sealed with the key
 * of the first process that starts on it, and every process opens it before it works. A process with another
 * key refuses, and so does one that would generate a key for a database that already holds sealed values:
 * either would seal secrets the other processes cannot open (webhook deliveries that cannot be signed), and
 * its own tracking links and return paths would not be recognised by them.
 */
export async function loadCheckedEncryptionKey(
  db: Kysely<Database>,
  config: Config,
  clock: Clock,
): Promise<EncryptionKey> {
  const canaries = createEncryptionCanaryRepo(db);
  const canary = await canaries.read();
  // A database from before the canary may hold sealed secrets already: the key must open those.
  const recorded = canary ?? (await canaries.findOlderSealedValue());
  const configured = readEncryptionKey(config);
  if (!configured && recorded) {
    throw new Error(
      `this database holds values sealed with an encryption key, and this process has none (POSTWIRE_ENCRYPTION_KEY ` +
        `is unset and there is no ${encryptionKeyFile(config)}): set POSTWIRE_ENCRYPTION_KEY to the key the ` +
        'other processes on this database use.',
    );
  }
  const encryption = configured ?? createEncryptionKeyFile(config);
  const secretBox = createSecretBox(encryption.key);
  const refuse = () => {
    // A key file generated just now for a database it cannot open would be found, and refused, at every start.
    if (encryption.created && encryption.file) rmSync(encryption.file, { force: true });
    const source =
      encryption.source === 'config' ? 'POSTWIRE_ENCRYPTION_KEY' : `the key file ${encryption.file}`;
    return new Error(
      `the encryption key (${source}) is not the one this database's secrets were sealed with: set ` +
        "POSTWIRE_ENCRYPTION_KEY to the key the database was first started with (the other processes' key).",
    );
  };
  if (recorded && !opens(secretBox, recorded)) throw refuse();
  if (canary === undefined) {
    await canaries.recordUnlessPresent(secretBox.seal(CANARY_PLAINTEXT), clock.now());
    // Two first starts at once, each with its own key: one canary is recorded, the other process must stop.
    const winner = await canaries.read();
    if (!winner || !opens(secretBox, winner)) throw refuse();
  }
  return encryption;
}

function opens(secretBox: SecretBox, sealed: string): boolean {
  try {
    secretBox.open(sealed);
    return true;
  } catch {
    return false;
  }
}
