// What `postwire help` and `postwire help settings` print.
import { CONFIG_SCHEMA } from '../config.ts';
import { usageOfSettings } from '../lib/settings.ts';

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
  reputation show --project <id> [--json]      A project's bounce and complaint rates, per From domain, and
                                               whether sending is paused (the reputation breaker).
  reputation resume --project <id> [--domain <name>]
                                               Resume a paused project (or only one From domain).
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
export const USAGE_POINTER = "Run 'postwire help' for the commands.\n";
