import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { ALL_ENGINES, engineSkip } from './helpers/app.ts';
import { runCliInProcess as runInProcess } from './helpers/cli-in-process.ts';
import {
  createProcessDatabase,
  type ProcessDatabase,
  runCli,
  startServerProcess,
} from './helpers/process.ts';

const ENCRYPTION_KEY = 'ab'.repeat(32);

describe('postwire usage', () => {
  const env = { POSTWIRE_DATA_DIR: '/nonexistent/never-created' };

  test('help prints the usage and exits 0, through the bin shim too', async () => {
    const result = await runCli(['help'], env, 'bin/postwire.js');
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, /Usage: postwire <command>/);
    assert.match(result.stdout, /keys create --project <id>/);
    for (const args of [['--help'], ['keys', 'create', '-h']]) {
      const inProcess = await runInProcess(args, env);
      assert.equal(inProcess.code, 0, args.join(' '));
      assert.equal(inProcess.stdout, result.stdout);
    }
  });

  test('--version prints the package version and exits 0, through the bin shim too', async () => {
    const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
    const { code, stdout, stderr } = await runCli(['--version'], env, 'bin/postwire.js');
    assert.deepEqual({ code, stdout, stderr }, { code: 0, stdout: `postwire ${version}\n`, stderr: '' });
    const short = await runInProcess(['-v'], env);
    assert.deepEqual(
      { code: short.code, stdout: short.stdout, stderr: short.stderr },
      { code: 0, stdout: `postwire ${version}\n`, stderr: '' },
    );
  });

  test('openapi prints the document the server serves, with no configuration needed', async () => {
    const result = await runInProcess(['openapi'], env);
    assert.equal(result.code, 0, result.stderr);
    const doc = JSON.parse(result.stdout);
    assert.equal(doc.openapi, '3.1.0');
    assert.equal(doc.paths['/v1/webhooks'].get.operationId, 'listWebhooks');
  });

  test('a usage error exits 2 with the error and a pointer to help on stderr, nothing more', async () => {
    const result = await runCli(['frobnicate'], env);
    assert.equal(result.code, 2);
    assert.equal(
      result.stderr,
      "postwire: Unknown command 'frobnicate'.\nRun 'postwire help' for the commands.\n",
    );
    assert.equal(result.stdout, '');
  });

  test('help lists the commands and points to help settings, which lists the settings', async () => {
    const help = await runInProcess(['help'], env);
    assert.match(help.stdout, /`postwire help settings` lists the settings/);
    assert.doesNotMatch(help.stdout, /POSTWIRE_RATE_LIMIT/);
    const settings = await runInProcess(['help', 'settings'], env);
    assert.equal(settings.code, 0);
    assert.match(settings.stdout, /^Configuration comes from the environment/);
    assert.match(settings.stdout, /POSTWIRE_RATE_LIMIT/);
  });

  test('each usage error says what is wrong', async () => {
    const cases: [string[], RegExp][] = [
      [['keys'], /'keys' needs a subcommand/],
      [['keys', 'frob'], /Unknown command 'keys frob'/],
      [['keys', 'create'], /keys create needs --project/],
      [['keys', 'create', '--project'], /argument missing/],
      [['keys', 'list', '--project', 'proj_x', '--bogus'], /Unknown option '--bogus'\.\n/],
      [['keys', 'revoke'], /keys revoke needs <key-id>/],
      [['projects', 'create'], /projects create needs <name>/],
      [['projects', 'create', 'two', 'words'], /unexpected 'words'.*quote/],
      [['migrate', 'now'], /migrate takes no arguments/],
      [['serve', '--port', '1'], /Unknown option '--port'/],
    ];
    for (const [args, message] of cases) {
      const result = await runInProcess(args, env);
      assert.equal(result.code, 2, `${args.join(' ')}: ${result.stderr}`);
      assert.match(result.stderr, message);
      assert.match(result.stderr, /\nRun 'postwire help' for the commands\.\n$/);
      assert.equal(result.stdout, '');
    }
    // No command at all: the list of commands (short: the settings are behind `postwire help settings`).
    const bare = await runInProcess([], env);
    assert.equal(bare.code, 2);
    assert.match(bare.stderr, /^Usage: postwire <command>/);
    assert.doesNotMatch(bare.stderr, /POSTWIRE_RATE_LIMIT/);
  });

  test('bad configuration exits 1 naming the setting', async () => {
    const result = await runCli(['projects', 'list'], { ...env, POSTWIRE_RATE_LIMIT: 'lots' });
    assert.equal(result.code, 1);
    assert.match(result.stderr, /POSTWIRE_RATE_LIMIT/);
  });
});

/** An empty, unmigrated database: a new SQLite directory, or a new PostgreSQL schema. */
async function unmigratedDatabase(
  engine: string,
): Promise<{ env: Record<string, string>; drop(): Promise<void> }> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'postwire-cli-'));
  if (engine === 'sqlite') {
    return { env: { POSTWIRE_DATA_DIR: dataDir }, drop: async () => rmSync(dataDir, { recursive: true }) };
  }
  const url = process.env.TEST_DATABASE_URL!;
  const schema = `t_${randomBytes(6).toString('hex')}`;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query(`CREATE SCHEMA ${schema}`);
  const separator = url.includes('?') ? '&' : '?';
  return {
    env: {
      DATABASE_URL: `${url}${separator}options=${encodeURIComponent(`-c search_path=${schema}`)}`,
      POSTWIRE_DATA_DIR: dataDir,
    },
    async drop() {
      await client.query(`DROP SCHEMA ${schema} CASCADE`);
      await client.end();
      rmSync(dataDir, { recursive: true });
    },
  };
}

for (const engine of ALL_ENGINES) {
  describe(`postwire on ${engine}`, { skip: engineSkip(engine) }, () => {
    let db: ProcessDatabase;
    before(async () => {
      db = await createProcessDatabase(engine);
    });
    after(async () => {
      await db.cleanup();
    });

    test('migrate applies what is pending, then says the database is up to date', async (t) => {
      const fresh = await unmigratedDatabase(engine);
      t.after(() => fresh.drop());
      const first = await runCli(['migrate'], fresh.env);
      assert.equal(first.code, 0, first.stderr);
      assert.match(first.stdout, engine === 'sqlite' ? /Database: SQLite / : /Database: PostgreSQL /);
      assert.match(first.stdout, /Applied 0001_/);
      // The PostgreSQL URL may hold a password; the command names the server and database only.
      if (engine === 'postgres') assert.ok(!first.stdout.includes('postgres://'));

      const again = await runCli(['migrate'], fresh.env);
      assert.equal(again.code, 0, again.stderr);
      assert.match(again.stdout, /Up to date/);
      assert.doesNotMatch(again.stdout, /Applied/);
    });

    test('projects create prints the id last; projects list shows it', async () => {
      const created = await runCli(['projects', 'create', 'Acme Mail'], db.env);
      assert.equal(created.code, 0, created.stderr);
      assert.match(created.lastLine, /^proj_[0-9a-z]{26}$/);

      const listed = await runCli(['projects', 'list'], db.env);
      assert.equal(listed.code, 0, listed.stderr);
      const row = listed.stdout.split('\n').find((line) => line.startsWith(created.lastLine));
      assert.ok(row, listed.stdout);
      assert.match(row, /Acme Mail/);

      const json = await runCli(['projects', 'list', '--json'], db.env);
      const project = JSON.parse(json.stdout).find((p: any) => p.id === created.lastLine);
      assert.deepEqual(Object.keys(project).sort(), ['created_at', 'default', 'id', 'name']);
      assert.equal(project.name, 'Acme Mail');
    });

    test('inbound received: says when nothing was received, as text and as JSON; --limit is checked', async () => {
      // The listing of real received mail is checked where mail is received (test/dashboard.test.ts).
      // In this process: the commands a process runs (above and below) exit as they answer.
      const text = await runInProcess(['inbound', 'received'], db.env);
      assert.equal(text.code, 0, text.stderr);
      assert.equal(text.stdout, 'No email received.\n');
      const json = await runInProcess(['inbound', 'received', '--json', '--limit', '5'], db.env);
      assert.equal(json.code, 0, json.stderr);
      assert.deepEqual(JSON.parse(json.stdout), []);
      for (const limit of ['0', '1001', 'ten']) {
        const bad = await runInProcess(['inbound', 'received', '--limit', limit], db.env);
        assert.equal(bad.code, 2, limit);
        assert.match(bad.stderr, /inbound received: --limit takes a whole number from 1 to 1000/);
      }
    });

    test('unknown project or key: a clear message and exit 1', async () => {
      for (const args of [
        ['keys', 'create', '--project', 'proj_01m8000000e000000000000000'],
        ['keys', 'list', '--project', 'nope'],
      ]) {
        const result = await runInProcess(args, db.env);
        assert.equal(result.code, 1, result.stderr);
        assert.match(result.stderr, /No project with id/);
        assert.equal(result.stdout, '');
      }
      const scoped = await runInProcess(
        ['keys', 'create', '--project', 'proj_x', '--permission', 'admin'],
        db.env,
      );
      assert.equal(scoped.code, 1);
      assert.match(scoped.stderr, /--permission must be one of: full_access, sending_access, read_only\./);
      const revoke = await runInProcess(['keys', 'revoke', 'key_nope'], db.env);
      assert.equal(revoke.code, 1);
      assert.match(revoke.stderr, /No key with id 'key_nope'/);
    });

    test('keys create, list and revoke work against a running `postwire serve`', async (t) => {
      const server = await startServerProcess({ ...db.env, POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY }, [
        'src/cli.ts',
        'serve',
        '--no-worker',
      ]);
      t.after(() => server.kill());

      const project = (await runCli(['projects', 'create', 'Keys test'], db.env)).lastLine;
      const created = await runCli(['keys', 'create', '--project', project, '--name', 'ci'], db.env);
      assert.equal(created.code, 0, created.stderr);
      const key = created.lastLine;
      assert.match(key, /^pw_[A-Za-z0-9_-]{32}$/);
      assert.match(created.stdout, /shown only this once/);

      const call = () => fetch(`${server.url}/v1/webhooks`, { headers: { authorization: `Bearer ${key}` } });
      const ok = await call();
      assert.equal(ok.status, 200);
      assert.deepEqual(await ok.json(), { object: 'list', data: [], has_more: false });

      const listed = await runCli(['keys', 'list', '--project', project], db.env);
      assert.equal(listed.code, 0, listed.stderr);
      assert.match(listed.stdout, /^ID\s+NAME\s+PREFIX\s+PERMISSION\s+DOMAIN\s+CREATED\s+REVOKED$/m);
      const keyId = /^(key_\S+)\s+ci\s+\S+\s+full_access\s+/m.exec(listed.stdout)?.[1];
      assert.ok(keyId, listed.stdout);
      // It identifies the key by a prefix, and shows neither the key nor its hash.
      assert.ok(listed.stdout.includes(key.slice(0, 10)));
      assert.ok(!listed.stdout.includes(key));
      assert.ok(!listed.stdout.includes(createHash('sha256').update(key).digest('hex')));

      const revoked = await runCli(['keys', 'revoke', keyId], db.env);
      assert.equal(revoked.code, 0, revoked.stderr);
      assert.match(revoked.stdout, new RegExp(`Revoked key ${keyId}`));

      // A read_only key made by the CLI reads, and is refused a change (403 naming the permission).
      const reader = await runCli(
        ['keys', 'create', '--project', project, '--name', 'ro', '--permission', 'read_only'],
        db.env,
      );
      assert.match(reader.stdout, /^Created read_only key key_/m);
      const asReader = { authorization: `Bearer ${reader.lastLine}`, 'content-type': 'application/json' };
      const write = await fetch(`${server.url}/v1/webhooks`, {
        method: 'POST',
        headers: asReader,
        body: JSON.stringify({ url: 'https://hooks.example.com/h', events: ['email.sent'] }),
      });
      assert.equal(write.status, 403);
      assert.equal((await write.json()).error.code, 'insufficient_permission');

      const refused = await call();
      assert.equal(refused.status, 401);
      assert.match(refused.headers.get('www-authenticate') ?? '', /^Bearer/);
      const body = await refused.json();
      assert.deepEqual(Object.keys(body), ['error']);
      assert.equal(typeof body.error.code, 'string');
      assert.equal(typeof body.error.message, 'string');
      assert.match(body.error.request_id, /^req_/);
      assert.equal(refused.headers.get('x-request-id'), body.error.request_id);

      const json = JSON.parse(
        (await runCli(['keys', 'list', '--project', project, '--json'], db.env)).stdout,
      );
      assert.equal(json.length, 2);
      assert.deepEqual(Object.keys(json[0]).sort(), [
        'created_at',
        'domain_id',
        'id',
        'name',
        'permission',
        'prefix',
        'revoked_at',
      ]);
      assert.match(json[0].revoked_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

      assert.equal(await server.stop(), 0);
    });
  });
}
