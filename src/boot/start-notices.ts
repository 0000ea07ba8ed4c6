// What a start tells the operator: the database and its migrations, the encryption key, the first start's
// API key in a box, and the line that says the process is up.
import pino from 'pino';
import type { Config } from '../config.ts';
import type { DatabaseHandle } from '../db/connection.ts';
import { processesShareDataDir } from '../db/handle.ts';
import type { EncryptionKey } from '../lib/encryption-key.ts';
import type { Output } from '../lib/operator-output.ts';
import type { ProjectService } from '../modules/projects/projects.service.ts';
import { describeDatabase } from './database.ts';
import type { ShutdownLogger } from './signals.ts';

/** What an operator should hear once the database and the key are ready. */
export function logStart(
  log: ShutdownLogger,
  config: Config,
  database: DatabaseHandle,
  applied: string[],
  encryption: EncryptionKey,
): void {
  log.info({ database: describeDatabase(config) }, 'Database ready');
  for (const migration of applied) log.info({ migration }, `Applied migration ${migration}`);
  if (encryption.created) {
    log.info(
      { file: encryption.file },
      'Generated the encryption key file for webhook secrets; back it up with the database',
    );
  }
  for (const warning of encryption.warnings) log.warn(warning);
  if (encryption.source === 'file' && !processesShareDataDir(database.engine)) {
    log.warn(
      { file: encryption.file },
      'POSTWIRE_ENCRYPTION_KEY is not set, so the key file in the data directory is used: every process ' +
        'sharing this PostgreSQL database must use the same key (set POSTWIRE_ENCRYPTION_KEY to its contents)',
    );
  }
}

export interface KeyNotice {
  projectId: string;
  /** Whether this start created the default key (and printed it). */
  created: boolean;
}

/**
 * The first start's project and API key (and POSTWIRE_BOOTSTRAP_KEY's), just before the API takes the port it
 * holds already (reservePort): only a start that will listen writes them, and a key printed here is stored, so
 * it works. It is written as it is, never as a log entry, just before the line that says the API listens: so
 * it is among the last lines of the start, and whoever waits for that line has the key.
 */
export async function bootstrapDefaultProject(
  projects: ProjectService,
  config: Config,
  url: string,
  stdout: Output,
): Promise<KeyNotice> {
  const { project, createdKey } = await projects.bootstrap(config.bootstrapKey);
  if (createdKey) stdout.write(formatKeyBox(createdKey, project.id, `${url}/dashboard`));
  return { projectId: project.id, created: createdKey !== undefined };
}

/**
 * The stream a pino logger writes to (standard output, or pino-pretty's worker, which passes text that is not
 * a log entry through as it is).
 */
export function loggerStream(log: object): Output | undefined {
  const stream = (log as Record<symbol, unknown>)[pino.symbols.streamSym];
  return stream && typeof (stream as Output).write === 'function' ? (stream as Output) : undefined;
}

/** The last line of a start: the process is up, and (serve) where to go next. */
export function logStarted(
  log: ShutdownLogger,
  config: Config,
  kind: 'serve' | 'worker' | 'submission',
  url: string | undefined,
  keys: KeyNotice | undefined,
): void {
  if (kind === 'serve') {
    // Where to go next: the dashboard, with the key just above it or where to get one.
    const dashboard = `${url}/dashboard`;
    const next = keys?.created
      ? 'sign in with the API key shown above'
      : `a new API key: postwire keys create --project ${keys?.projectId}`;
    log.info(
      { url, dashboard },
      `Postwire is listening on ${url}: dashboard at ${dashboard} (${next}), API reference at ${url}/docs`,
    );
  } else if (kind === 'submission') log.info('Postwire submission started');
  else {
    log.info(
      { database: describeDatabase(config), ...(url ? { url } : {}) },
      url ? `Postwire worker started; its probes and metrics are on ${url}` : 'Postwire worker started',
    );
  }
}

/** The first start's API key, in a box that stands out from the log lines around it. */
export function formatKeyBox(key: string, projectId: string, dashboardUrl: string): string {
  const lines = [
    `Your API key (shown once): ${key}`,
    '',
    'Store it now: it is not shown again, and only its hash is kept.',
    `It belongs to the default project ${projectId}.`,
    `More keys: postwire keys create --project ${projectId}`,
    `Dashboard: ${dashboardUrl} (sign in with this key)`,
  ];
  const width = Math.max(...lines.map((line) => line.length));
  const rule = '─'.repeat(width + 2);
  return ['', `┌${rule}┐`, ...lines.map((line) => `│ ${line.padEnd(width)} │`), `└${rule}┘`, '', ''].join(
    '\n',
  );
}
