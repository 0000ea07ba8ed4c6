// The commands on the database as a whole: `migrate`, `prune`, `backup` and `copy-to`.
import { describeDatabase, openConfiguredDatabase } from '../boot/database.ts';
import { migrateToLatest } from '../db/migrate.ts';
import { runBackup, runCopyTo } from '../ops/ops-commands.ts';
import { type Command, json, listing } from './command.ts';

export const databaseCommands: Command[] = [
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
    words: ['prune'],
    options: { 'dry-run': { type: 'boolean' }, ...json },
    async run(context, values) {
      const { config, io } = context;
      // With RETENTION off, only the API logs are pruned (API_LOG_RETENTION, API_LOG_MAX_ROWS).
      if (config.retentionMs === undefined) io.stderr.write('RETENTION is off: only API logs are pruned.\n');
      const retention = (await context.services()).retention({ retentionMs: config.retentionMs });
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
