// The `postwire` command. It reads the same environment as the server and opens the same database, so it
// works beside a running server (SQLite runs in WAL mode with a busy timeout; PostgreSQL is shared anyway).
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { CONFIG_SCHEMA, ConfigError, loadConfig, type Config } from './config.ts';
import { usageOfSettings } from './lib/settings.ts';
import type { DatabaseHandle } from './db/connection.ts';
import { migrateToLatest } from './db/migrate.ts';
import { systemClock } from './lib/clock.ts';
import { POSTWIRE_VERSION } from './lib/version.ts';
import { renderOpenApiDocument } from './openapi-document.ts';
import { runBackup, runCopyTo } from './ops/ops-commands.ts';
import { DomainError, invalidParam } from './lib/errors.ts';
import type { KeyPermission } from './db/schema.ts';
import { createInboundRepo } from './modules/inbound/inbound.repo.ts';
import { createReceivedRepo } from './modules/inbound/received.repo.ts';
import { createRetention } from './modules/retention/retention.ts';
import { KEY_PERMISSIONS, type ProjectService } from './modules/projects/projects.service.ts';
import { createSecretBox, type SecretBox } from './lib/crypto.ts';
import { loadOrCreateEncryptionKey } from './lib/encryption-key.ts';
import { systemResolver } from './lib/network-policy.ts';
import { createServices, type Services } from './services.ts';
import {
  describeDatabase,
  describeError,
  openConfiguredDatabase,
  type Output,
  runServer,
  runSubmission,
  runWorker,
} from './server.ts';

export const USAGE = `Usage: postwire <command> [options]

Commands:
  serve [--no-worker] [--no-inbound]           Run the HTTP API and the background workers (migrates first).
                                               --no-worker: this process runs no background worker.
                                               --no-inbound: no SMTP listener for reports (see BOUNCE_DOMAIN).
  worker [--no-inbound]                        Run only the background workers (sending, reading reports,
                                               webhook delivery), and the SMTP listener for reports.
  submission                                   Run only the SMTP submission server (SUBMISSION_PORT,
                                               SUBMISSION_TLS_PORT); a serve or worker process sends its mail.
  migrate                                      Apply pending database migrations.
  projects create <name>                       Create a project; prints its id on the last line.
  projects list [--json]                       List projects.
  keys create --project <id> [--name <label>] [--permission full_access|sending_access|read_only]
              [--domain <domain-id>]           Create an API key; prints it on the last line.
                                               It is shown only this once.
  keys list --project <id> [--json]            List a project's keys (never the keys themselves).
  keys revoke <key-id>                         Revoke a key; requests with it are refused at once.
  prune [--dry-run] [--json]                   Delete what is older than RETENTION now (the workers also do it,
                                               in small batches); --dry-run counts what would go.
  inbound list [--all] [--limit <n>] [--json]  Reports received that matched no email or could not be read,
                                               with why (--all: every received message). Newest first.
  inbound received [--limit <n>] [--json]      The latest received emails of every project (routed mail, one
                                               per recipient): project, recipient, from, subject, status, route.
  backup <file>                                Copy the SQLite database while the service runs, with the key
                                               file beside it (<file>.key). PostgreSQL: pg_dump.
  copy-to <postgres-url>                       Copy the SQLite database into an empty PostgreSQL database
                                               (ids kept, resumable, row counts compared at the end).
  openapi                                      Print the OpenAPI document (as served at /v1/openapi.json).
  help                                         Show this help.
  help settings                                List the settings, read from the environment by every command.
  --version                                    Print the version.

Configuration comes from the environment, as for the server: \`postwire help settings\` lists the settings,
docs/configuration.md says more.
`;

/** `postwire help settings`: every setting, its default and what it does. */
export const SETTINGS_USAGE = `Configuration comes from the environment, as for the server (docs/configuration.md says more):

${usageOfSettings(CONFIG_SCHEMA)}`;

/** After a usage error: the error stays the last thing on the screen, with where to read more. */
const USAGE_POINTER = "Run 'postwire help' for the commands.\n";

export interface CliIo {
  stdout: Output;
  stderr: Output;
  env: Record<string, string | undefined>;
}

/** A mistake in how the command was called: answered with the usage text and exit code 2. */
class UsageError extends Error {}

type Options = NonNullable<ParseArgsConfig['options']>;
type Values = Record<string, string | boolean | (string | boolean)[] | undefined>;

interface Context {
  io: CliIo;
  config: Config;
  /** Opens (and migrates) the database on first use; closed when the command ends. */
  database(): Promise<DatabaseHandle>;
  /** The services on that database, built on first use, as the server builds them. */
  services(): Promise<Services>;
  projects(): Promise<ProjectService>;
}

interface Command {
  /** The words that name it, e.g. ['keys', 'create']. */
  words: string[];
  options?: Options;
  /** Names of the positional arguments it requires. */
  args?: string[];
  /** String options that must be given. */
  required?: string[];
  /** Returns undefined when the process keeps running (serve). */
  run(context: Context, values: Values, args: string[]): Promise<number | undefined>;
}

const json = { json: { type: 'boolean' } } as const satisfies Options;

const commands: Command[] = [
  {
    words: ['serve'],
    options: { worker: { type: 'boolean', default: true }, inbound: { type: 'boolean', default: true } },
    async run({ config }, values) {
      await runServer(config, { worker: values.worker !== false, inbound: values.inbound !== false });
      return undefined;
    },
  },
  {
    words: ['submission'],
    async run({ config }) {
      await runSubmission(config);
      return undefined;
    },
  },
  {
    words: ['worker'],
    options: { inbound: { type: 'boolean', default: true } },
    async run({ config }, values) {
      await runWorker(config, { inbound: values.inbound !== false });
      return undefined;
    },
  },
  {
    words: ['migrate'],
    async run({ io, config }) {
      const database = await openConfiguredDatabase(config, { poolSize: 1 });
      try {
        io.stdout.write(`Database: ${describeDatabase(config)}\n`);
        const applied = await migrateToLatest(database.db);
        for (const name of applied) io.stdout.write(`Applied ${name}\n`);
        io.stdout.write(applied.length ? `Applied ${applied.length} migration(s).\n` : 'Up to date.\n');
      } finally {
        await database.close();
      }
      return 0;
    },
  },
  {
    words: ['projects', 'create'],
    args: ['name'],
    async run(context, _values, [name]) {
      const project = await (await context.projects()).createProject(name!);
      context.io.stdout.write(`Created project '${project.name}'. Its id:\n${project.id}\n`);
      return 0;
    },
  },
  {
    words: ['projects', 'list'],
    options: json,
    async run(context, values) {
      const projects = await (await context.projects()).listProjects();
      const rows = projects.map((project) => ({
        id: project.id,
        name: project.name,
        default: project.isDefault,
        created_at: project.createdAt,
      }));
      context.io.stdout.write(
        listing(values, rows, {
          headers: ['ID', 'NAME', 'DEFAULT', 'CREATED'],
          cells: (row) => [row.id, row.name, row.default ? 'yes' : '', row.created_at],
          empty: 'No projects yet.',
        }),
      );
      return 0;
    },
  },
  {
    words: ['keys', 'create'],
    options: {
      project: { type: 'string' },
      name: { type: 'string' },
      permission: { type: 'string' },
      domain: { type: 'string' },
    },
    required: ['project'],
    async run(context, values) {
      const projectId = values.project as string;
      const name = typeof values.name === 'string' ? values.name : null;
      const permission = values.permission as string | undefined;
      if (permission !== undefined && !(KEY_PERMISSIONS as readonly string[]).includes(permission)) {
        throw invalidParam('permission', `--permission must be one of: ${KEY_PERMISSIONS.join(', ')}.`);
      }
      const { key, plaintext } = await (
        await context.projects()
      ).createKey(projectId, {
        name,
        permission: permission as KeyPermission | undefined,
        domainId: (values.domain as string | undefined) ?? null,
      });
      const scope = `${key.permission}${key.domainId ? ` on domain ${key.domainId}` : ''}`;
      context.io.stdout.write(
        `Created ${scope} key ${key.id}${name ? ` '${name}'` : ''} for project ${projectId}.\n` +
          'Store it now: it is shown only this once, and only its hash is kept.\n' +
          `${plaintext}\n`,
      );
      return 0;
    },
  },
  {
    words: ['keys', 'list'],
    options: { project: { type: 'string' }, ...json },
    required: ['project'],
    async run(context, values) {
      const keys = await (await context.projects()).listKeys(values.project as string);
      // Only what identifies a key: the secret and its hash never leave the database.
      const rows = keys.map((key) => ({
        id: key.id,
        name: key.name,
        prefix: key.keyPrefix,
        permission: key.permission,
        domain_id: key.domainId,
        created_at: key.createdAt,
        revoked_at: key.revokedAt,
      }));
      context.io.stdout.write(
        listing(values, rows, {
          headers: ['ID', 'NAME', 'PREFIX', 'PERMISSION', 'DOMAIN', 'CREATED', 'REVOKED'],
          cells: (row) => [
            row.id,
            row.name ?? '',
            `${row.prefix}…`,
            row.permission,
            row.domain_id ?? '',
            row.created_at,
            row.revoked_at ?? '',
          ],
          empty: 'No keys in this project.',
        }),
      );
      return 0;
    },
  },
  {
    words: ['keys', 'revoke'],
    args: ['key-id'],
    async run(context, _values, [keyId]) {
      const key = await (await context.projects()).revokeKeyAsOperator(keyId!);
      context.io.stdout.write(
        `Revoked key ${key.id}${key.name ? ` '${key.name}'` : ''} (at ${key.revokedAt}).\n`,
      );
      return 0;
    },
  },
  {
    words: ['prune'],
    options: { 'dry-run': { type: 'boolean' }, ...json },
    async run(context, values) {
      const { config, io } = context;
      if (config.retentionMs === undefined) {
        io.stdout.write('RETENTION is off: nothing is pruned.\n');
        return 0;
      }
      const retention = createRetention({
        database: await context.database(),
        clock: systemClock,
        retentionMs: config.retentionMs,
      });
      const dryRun = values['dry-run'] === true;
      const rows = dryRun ? await retention.dryRun() : await retention.prune();
      io.stdout.write(
        listing(values, rows, {
          headers: ['TABLE', dryRun ? 'WOULD DELETE' : 'DELETED'],
          cells: (row) => [row.table, String(row.rows)],
          empty: 'No tables.',
        }),
      );
      return 0;
    },
  },
  {
    words: ['inbound', 'list'],
    options: { all: { type: 'boolean' }, limit: { type: 'string' }, ...json },
    async run(context, values) {
      const limit = values.limit === undefined ? 50 : Number(values.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000) {
        throw new UsageError('inbound list: --limit takes a whole number from 1 to 1000.');
      }
      const { db, engine } = await context.database();
      const rows = await createInboundRepo(db, engine).listForOperator({ all: values.all === true, limit });
      context.io.stdout.write(
        listing(values, rows, {
          headers: ['ID', 'RECEIVED', 'STATUS', 'KIND', 'FROM', 'TO', 'WHY'],
          cells: (row) => [
            row.id,
            row.receivedAt,
            row.status,
            row.kind ?? '',
            row.mailFrom || '<>',
            row.rcptTo.join(','),
            row.detail ?? '',
          ],
          empty: values.all === true ? 'No messages received.' : 'No unmatched or unreadable reports.',
        }),
      );
      return 0;
    },
  },
  {
    words: ['inbound', 'received'],
    options: { limit: { type: 'string' }, ...json },
    async run(context, values) {
      const limit = values.limit === undefined ? 50 : Number(values.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000) {
        throw new UsageError('inbound received: --limit takes a whole number from 1 to 1000.');
      }
      const { db } = await context.database();
      const rows = (await createReceivedRepo(db).latest(limit)).map((record) => ({
        id: record.id,
        received_at: record.receivedAt,
        project_id: record.projectId,
        recipient: record.recipient,
        from: record.fromAddress,
        subject: record.subject,
        status: record.status,
        route_id: record.routeId,
      }));
      context.io.stdout.write(
        listing(values, rows, {
          headers: ['ID', 'RECEIVED', 'PROJECT', 'RECIPIENT', 'FROM', 'SUBJECT', 'STATUS', 'ROUTE'],
          cells: (row) => [
            row.id,
            row.received_at,
            row.project_id,
            row.recipient,
            row.from ?? '',
            // One line per email: a subject is the sender's text, of any length.
            oneLine(row.subject ?? '', 60),
            row.status,
            row.route_id ?? '',
          ],
          empty: 'No email received.',
        }),
      );
      return 0;
    },
  },
  {
    words: ['backup'],
    args: ['file'],
    run: ({ io, config }, _values, [file]) => runBackup(io, config, file!),
  },
  {
    words: ['copy-to'],
    args: ['postgres-url'],
    run: ({ io, config }, _values, [url]) => runCopyTo(io, config, url!),
  },
];

/** Runs one command; resolves to its exit code, or to undefined when the process keeps running (serve). */
export async function runCli(argv: string[], io: CliIo): Promise<number | undefined> {
  if (argv.length === 0) {
    io.stderr.write(USAGE);
    return 2;
  }
  if (argv[0] === 'help' && argv[1] === 'settings' && argv.length === 2) {
    io.stdout.write(SETTINGS_USAGE);
    return 0;
  }
  if (argv[0] === 'help' || argv.includes('--help') || argv.includes('-h')) {
    io.stdout.write(USAGE);
    return 0;
  }
  if (argv[0] === '--version' || argv[0] === '-v' || argv[0] === 'version') {
    io.stdout.write(`postwire ${POSTWIRE_VERSION}\n`);
    return 0;
  }
  // Needs no configuration (no database, no key): it describes the code, not an installation.
  if (argv[0] === 'openapi' && argv.length === 1) {
    io.stdout.write(`${JSON.stringify(await renderOpenApiDocument(), null, 2)}\n`);
    return 0;
  }

  let database: DatabaseHandle | undefined;
  let services: Services | undefined;
  try {
    const { command, values, args } = parse(argv);
    const config = loadConfig(io.env);
    const context: Context = {
      io,
      config,
      async database() {
        if (!database) {
          database = await openConfiguredDatabase(config, { poolSize: 2 });
          // A database the server never started on works too: the schema is brought up to date first.
          await migrateToLatest(database.db);
        }
        return database;
      },
      async services() {
        services ??= createServices(await context.database(), config, {
          clock: systemClock,
          secretBox: secretBoxOnFirstUse(config),
          resolver: systemResolver,
        });
        return services;
      },
      async projects() {
        return (await context.services()).projects;
      },
    };
    return await command.run(context, values, args);
  } catch (error) {
    if (error instanceof UsageError) {
      io.stderr.write(`postwire: ${error.message}\n${USAGE_POINTER}`);
      return 2;
    }
    const message =
      error instanceof ConfigError || error instanceof DomainError ? error.message : describeError(error);
    io.stderr.write(`postwire: ${message}\n`);
    return 1;
  } finally {
    await services?.close();
    await database?.close();
  }
}

/**
 * No command opens a secret today: the encryption key is loaded (or generated, on a fresh data directory)
 * only when one does, so listing keys never writes a key file.
 */
function secretBoxOnFirstUse(config: Config): SecretBox {
  let box: SecretBox | undefined;
  const open = () => (box ??= createSecretBox(loadOrCreateEncryptionKey(config).key));
  return {
    seal: (plaintext) => open().seal(plaintext),
    open: (sealed) => open().open(sealed),
    mac: (purpose, data) => open().mac(purpose, data),
  };
}

function parse(argv: string[]): { command: Command; values: Values; args: string[] } {
  const command =
    commands.find((c) => c.words.every((word, index) => argv[index] === word)) ??
    (() => {
      const group = commands.find((c) => c.words.length > 1 && c.words[0] === argv[0]);
      if (group && argv[1] === undefined) throw new UsageError(`'${argv[0]}' needs a subcommand.`);
      if (group) throw new UsageError(`Unknown command '${argv[0]} ${argv[1]}'.`);
      throw new UsageError(`Unknown command '${argv[0]}'.`);
    })();
  const name = command.words.join(' ');
  let parsed: { values: Values; positionals: string[] };
  try {
    parsed = parseArgs({
      args: argv.slice(command.words.length),
      options: command.options ?? {},
      allowPositionals: true,
      allowNegative: true,
      strict: true,
    });
  } catch (error) {
    // parseArgs explains unknown options and missing option values well; it only lacks the command's name.
    const message = (error as Error).message.replace(/ To specify a positional argument.*$/s, '');
    throw new UsageError(`${name}: ${message}`);
  }
  const expected = command.args ?? [];
  if (parsed.positionals.length < expected.length) {
    throw new UsageError(`${name} needs <${expected[parsed.positionals.length]}>.`);
  }
  if (parsed.positionals.length > expected.length) {
    const extra = parsed.positionals.slice(expected.length).join(' ');
    throw new UsageError(
      `${name} takes ${expected.length ? `only <${expected.join('> <')}>` : 'no arguments'}; unexpected '${extra}'` +
        (expected.includes('name') ? ' (quote a name that has spaces).' : '.'),
    );
  }
  for (const option of command.required ?? []) {
    const value = parsed.values[option];
    if (typeof value !== 'string' || value === '') throw new UsageError(`${name} needs --${option} <id>.`);
  }
  return { command, values: parsed.values, args: parsed.positionals };
}

/** Rows as pretty JSON (`--json`, for scripts) or as an aligned table (for people). */
/** Rows as JSON with `--json`, else as a table: its `headers`, each row's `cells`, and what an empty one says. */
function listing<Row>(
  values: Values,
  rows: Row[],
  shown: { headers: string[]; cells: (row: Row) => string[]; empty: string },
): string {
  return values.json === true
    ? `${JSON.stringify(rows, null, 2)}\n`
    : table(shown.headers, rows.map(shown.cells), shown.empty);
}

/** `text` on one line (control characters as spaces), cut to `max` characters with an ellipsis. */
function oneLine(text: string, max: number): string {
  const flat = text.replace(/\p{Cc}+/gu, ' ');
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

function table(headers: string[], rows: string[][], empty: string): string {
  if (rows.length === 0) return `${empty}\n`;
  const widths = headers.map((header, column) =>
    Math.max(header.length, ...rows.map((row) => (row[column] ?? '').length)),
  );
  const line = (cells: string[]) =>
    cells
      .map((cell, column) => cell.padEnd(widths[column]!))
      .join('  ')
      .trimEnd();
  return `${[headers, ...rows].map(line).join('\n')}\n`;
}

/** The process entry: runs the command with the real streams and environment, and sets the exit code. */
export async function main(argv: string[]): Promise<void> {
  const code = await runCli(argv, { stdout: process.stdout, stderr: process.stderr, env: process.env });
  if (code !== undefined) process.exitCode = code;
}

if (import.meta.main) await main(process.argv.slice(2));
