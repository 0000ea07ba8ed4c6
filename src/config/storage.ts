// Where data lives and how long it stays: the database, the SQLite directory, the encryption key, retention.
import path from 'node:path';
import { parseDuration } from '../lib/duration.ts';
import { custom, duration, fixed, integer, rawValue, readDuration, section } from '../lib/settings.ts';

/** Given here rather than inline: the reference shows them inside other settings' text. */
const RETENTION_DEFAULT = '30d';
/** TRANSACTION_WARN's default outside production: a transaction open a second holds up every other on SQLite. */
const TRANSACTION_WARN_MS = 1000;
/**
 * Small batches, so no statement holds the write lock long beside sends and deliveries; a pause after each,
 * so that pruning takes at most `dutyCycle` of the time (on SQLite a DELETE holds the event loop while it
 * runs). Measured with bench/retention.ts: deliveries keep about 0.8 of their rate while the pruner runs.
 */
const RETENTION_PRUNING = { batchSize: 200, intervalMs: 60_000, dutyCycle: 0.1 };
/** The API logs' own limits (GET /v1/logs): shown in other settings' text too. */
const API_LOG_RETENTION_DEFAULT = '7d';
const API_LOG_MAX_ROWS_DEFAULT = 10_000;

export const STORAGE_SETTINGS = section('Storage and keys', {
  databaseUrl: custom('DATABASE_URL', {
    default: 'unset',
    description: '`postgres://…` selects PostgreSQL; unset: SQLite in `POSTWIRE_DATA_DIR/postwire.db`',
    read(context) {
      const url = rawValue(context, 'DATABASE_URL');
      if (url && !/^postgres(ql)?:\/\//.test(url)) {
        context.problems.push(
          `DATABASE_URL must start with postgres:// (leave it unset for the embedded SQLite).`,
        );
      }
      return url;
    },
  }),
  cacheStampLeaseMs: duration('CACHE_STAMP_LEASE', {
    default: '1s',
    // A write's answer waits the lease when a process does not acknowledge it: longer would stall writes.
    max: '1s',
    description: 'PostgreSQL: how long a stamp read vouches for the in-memory reads; at most `1s`',
    details:
      "the in-memory reads are keys, webhooks, templates and sending domains. A process's answer after a " +
      'write of its own to those tables waits until every other process has acknowledged hearing of it (a ' +
      "round trip), or as long as the lease when one does not, so that no process's older reads stand when " +
      'the client hears of the write. The same in every process sharing the database; `0` reads the stamps ' +
      'on every use and never waits',
  }),
  transactionWarnMs: custom('TRANSACTION_WARN', {
    default: '`1s`, off when `NODE_ENV=production`',
    description: 'a transaction open longer than this logs the stack that opened it; `off` turns it off',
    details:
      'while a transaction is open on SQLite, every other query of the process waits for it (src/db/' +
      'transaction-watch.ts); a stack per slow transaction helps whoever develops or tests',
    read(context): number | undefined {
      const raw = rawValue(context, 'TRANSACTION_WARN')?.trim().toLowerCase();
      if (raw === undefined) return context.env.NODE_ENV === 'production' ? undefined : TRANSACTION_WARN_MS;
      if (raw === 'off') return undefined;
      const value = parseDuration(raw);
      if (value !== undefined && value >= 1) return value;
      context.problems.push(
        `TRANSACTION_WARN must be a duration such as 500ms or 2s, or off, got '${context.env.TRANSACTION_WARN}'.`,
      );
      return TRANSACTION_WARN_MS;
    },
  }),
  dataDir: custom('POSTWIRE_DATA_DIR', {
    default: '`./data`',
    description: 'where the SQLite file and the generated encryption key live',
    read: (context) => path.resolve(rawValue(context, 'POSTWIRE_DATA_DIR') ?? './data'),
  }),
  encryptionKey: custom('POSTWIRE_ENCRYPTION_KEY', {
    default: 'generated',
    description: '32 bytes (64 hex digits or base64) sealing webhook secrets and domain keys (AES-256-GCM)',
    details:
      'when unset, one is generated once into `POSTWIRE_DATA_DIR/encryption.key` (mode 0600). Every process ' +
      'sharing a PostgreSQL must use the same key',
    read(context): Buffer | undefined {
      const raw = rawValue(context, 'POSTWIRE_ENCRYPTION_KEY');
      if (raw === undefined) return undefined;
      const key = decodeKey(raw);
      if (!key)
        context.problems.push('POSTWIRE_ENCRYPTION_KEY must be 32 bytes, as 64 hex digits or base64.');
      return key;
    },
  }),
  bootstrapKey: custom('POSTWIRE_BOOTSTRAP_KEY', {
    default: 'unset',
    description: 'an API key the default project must have at start (idempotent); never printed',
    details: 'for containers and tests',
    read(context) {
      const key = rawValue(context, 'POSTWIRE_BOOTSTRAP_KEY');
      if (key !== undefined && key.length < 16) {
        context.problems.push('POSTWIRE_BOOTSTRAP_KEY must be at least 16 characters.');
      }
      return key;
    },
  }),
  retentionPruning: fixed(
    RETENTION_PRUNING,
    'rows per DELETE, how often the workers prune, and the share of the time their pruning may take',
  ),
  retentionMs: custom('RETENTION', {
    default: `\`${RETENTION_DEFAULT}\``,
    description:
      'events, attempts, stored MIME, tracking rows and received reports older than this are deleted',
    details:
      `by the workers, ${RETENTION_PRUNING.batchSize} rows per statement for at most ` +
      `${RETENTION_PRUNING.dutyCycle * 100} % of the time, so sends and deliveries never wait long; emails, ` +
      'recipients, suppressions, templates and the daily numbers are kept. At least `1h`; `off` keeps ' +
      'everything. `postwire prune --dry-run` says what would go now',
    read(context): number | undefined {
      if (context.env.RETENTION?.trim().toLowerCase() === 'off') return undefined;
      const ms = readDuration(context, 'RETENTION') ?? parseDuration(RETENTION_DEFAULT)!;
      if (ms < 3_600_000) {
        context.problems.push(
          `RETENTION must be a duration of at least 1h (such as 30d), or off, got '${context.env.RETENTION}'.`,
        );
      }
      return ms;
    },
  }),
  apiLogRetentionMs: duration('API_LOG_RETENTION', {
    default: API_LOG_RETENTION_DEFAULT,
    min: '1h',
    max: '3650d',
    description: "API request logs (GET /v1/logs, Resend's `logs`) older than this are deleted",
    details:
      'by the same pruner as RETENTION, which prunes them even when RETENTION is `off`; each log is at most ' +
      'about 6 KiB (excerpts of its bodies of at most 2 KiB each)',
  }),
  apiLogMaxRows: integer('API_LOG_MAX_ROWS', {
    default: API_LOG_MAX_ROWS_DEFAULT,
    min: 0,
    max: 10_000_000,
    description: 'API request logs kept per project, newest first; `0` records none',
    details:
      `the pruner deletes the older ones every ${RETENTION_PRUNING.intervalMs / 1000} s, so a project may be ` +
      "a minute's requests past it in between. Logs are written in batches after the answers: a process " +
      'that crashes loses its last quarter of a second of them',
  }),
});

function decodeKey(text: string): Buffer | undefined {
  const bytes = /^[0-9a-fA-F]{64}$/.test(text) ? Buffer.from(text, 'hex') : Buffer.from(text, 'base64');
  return bytes.length === 32 ? bytes : undefined;
}
