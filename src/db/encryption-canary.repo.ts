import type { Kysely } from 'kysely';
import type { Database } from './schema.ts';

/** The table has one row; its key is fixed so that two first starts cannot both record one. */
const ONLY_ROW = 1;

export interface EncryptionCanaryRepo {
  /** The sealed canary, once a process has recorded it. */
  read(): Promise<string | undefined>;
  /** Records the canary unless another process already has (that one wins: read it back). */
  recordUnlessPresent(sealed: string, createdAt: Date): Promise<void>;
  /** Some value sealed before the canary existed (a webhook secret, a domain's DKIM key), for older databases. */
  findOlderSealedValue(): Promise<string | undefined>;
}

export function createEncryptionCanaryRepo(db: Kysely<Database>): EncryptionCanaryRepo {
  return {
    async read() {
      const row = await db
        .selectFrom('encryption_canary')
        .select('sealed')
        .where('id', '=', ONLY_ROW)
        .executeTakeFirst();
      return row?.sealed;
    },
    async recordUnlessPresent(sealed, createdAt) {
      await db
        .insertInto('encryption_canary')
        .values({ id: ONLY_ROW, sealed, created_at: createdAt.toISOString() })
        .onConflict((conflict) => conflict.column('id').doNothing())
        .execute();
    },
    async findOlderSealedValue() {
      const webhook = await db
        .selectFrom('webhooks')
        .select('secret_sealed')
        .where('secret_sealed', 'is not', null)
        .limit(1)
        .executeTakeFirst();
      if (webhook?.secret_sealed) return webhook.secret_sealed;
      const domain = await db
        .selectFrom('domains')
        .select('dkim_private_key_sealed')
        .limit(1)
        .executeTakeFirst();
      return domain?.dkim_private_key_sealed;
    },
  };
}
