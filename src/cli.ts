// The `postwire` command. It reads the same environment as the server and opens the same database, so it
// works beside a running server (SQLite runs in WAL mode with a busy timeout; PostgreSQL is shared anyway).
// The commands are in src/cli/, a file per group; this file finds the one called, parses its arguments and
// gives it the database and the services, opened on first use and closed when it ends.
import { parseArgs } from 'node:util';
import { openConfiguredDatabase } from './boot/database.ts';
import { type Command, type CliIo, type Context, UsageError, type Values } from './cli/command.ts';
import { databaseCommands } from './cli/database.ts';
import { inboundCommands } from './cli/inbound.ts';
import { processCommands } from './cli/processes.ts';
import { projectCommands } from './cli/projects.ts';
import { SETTINGS_USAGE, USAGE, USAGE_POINTER } from './cli/usage.ts';
import { ConfigError, loadConfig, type Config } from './config.ts';
import type { DatabaseHandle } from './db/connection.ts';
import { migrateToLatest } from './db/migrate.ts';
import { systemClock } from './lib/clock.ts';
import { createSecretBox, type SecretBox } from './lib/crypto.ts';
import { loadOrCreateEncryptionKey } from './lib/encryption-key.ts';
import { DomainError } from './lib/errors.ts';
import { systemResolver } from './lib/network-policy.ts';
import { describeError } from './lib/operator-output.ts';
import { POSTWIRE_VERSION } from './lib/version.ts';
import { renderOpenApiDocument } from './openapi-document.ts';
import { createServices, type Services } from './services.ts';

export type { CliIo } from './cli/command.ts';
export { SETTINGS_USAGE, USAGE } from './cli/usage.ts';

const commands: Command[] = [...processCommands, ...databaseCommands, ...projectCommands, ...inboundCommands];

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

/** The process entry: runs the command with the real streams and environment, and sets the exit code. */
export async function main(argv: string[]): Promise<void> {
  const code = await runCli(argv, { stdout: process.stdout, stderr: process.stderr, env: process.env });
  if (code !== undefined) process.exitCode = code;
}

if (import.meta.main) await main(process.argv.slice(2));
