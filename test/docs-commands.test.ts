// Every shell command in README.md and docs/ is either run here, as written, against a server started as the
// README starts it, or listed below with the reason it cannot run on a test machine. A command added to the
// docs without either fails this test, so the docs cannot drift from the code unseen.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { test } from 'node:test';
import {
  childEnv,
  inboundSmtpPort,
  REPO_ROOT,
  startServerProcess,
  submissionSmtpPort,
} from './helpers/process.ts';
import { until } from './helpers/until.ts';

const run = promisify(execFile);

/** The documents, in the order a reader meets them (a template is published before a send names it). */
function documents(): string[] {
  const api = readdirSync(path.join(REPO_ROOT, 'docs/api'))
    .filter((file) => file.endsWith('.md'))
    .sort((a, b) => (a === 'templates.md' ? -1 : b === 'templates.md' ? 1 : a.localeCompare(b)))
    .map((file) => `docs/api/${file}`);
  const guides = readdirSync(path.join(REPO_ROOT, 'docs'))
    .filter((file) => file.endsWith('.md'))
    .map((file) => `docs/${file}`);
  return ['README.md', ...api, ...guides];
}

interface DocCommand {
  file: string;
  /** The command as written: its lines, continuation lines and heredocs included. */
  text: string;
  /** Its first line without a trailing comment: how the lists below name it. */
  name: string;
}

/** The commands of a document's `sh` blocks: a line, its `\` continuations, and a heredoc's body. */
function commandsOf(file: string): DocCommand[] {
  const markdown = readFileSync(path.join(REPO_ROOT, file), 'utf8');
  const commands: DocCommand[] = [];
  for (const block of markdown.matchAll(/^ *```(?:sh|bash|shell)\n([\s\S]*?)^ *```/gm)) {
    const lines = block[1]!.split('\n');
    for (let index = 0; index < lines.length; index += 1) {
      const first = lines[index]!.trim();
      if (first === '' || first.startsWith('#')) continue;
      const taken = [lines[index]!];
      const heredoc = /<<'?(\w+)'?/.exec(first)?.[1];
      // Continued by a trailing `\`, an open single quote (a JSON body over several lines), or a heredoc.
      const continues = () =>
        heredoc
          ? lines[index]!.trim() !== heredoc
          : /\\$/.test(lines[index]!) || (taken.join('\n').match(/'/g) ?? []).length % 2 === 1;
      while (index + 1 < lines.length && continues()) {
        index += 1;
        taken.push(lines[index]!);
      }
      const name = first.replace(/\s+#.*$/, '').trim();
      commands.push({ file, text: taken.map((line) => line.trim()).join('\n'), name });
    }
  }
  return commands;
}

// Commands that cannot run here, by their first line, with the reason. Whatever holds `…` (an id or value from
// an earlier answer, or a credential) is left out by that rule below; `[…]` marks optional arguments.
const NOT_RUN: Record<string, string> = {
  'npm ci && npm start': 'the server this test runs is started so; test/npm-start.test.ts stops it',
  'SUBMISSION_PORT=2587 SUBMISSION_ALLOW_PLAIN_LOOPBACK=true npm start':
    'the server this test runs is started so (on a free port, put in the swaks command that follows)',
  'INBOUND_MX_HOST=mx.acme.test INBOUND_SMTP_PORT=2525 npm start':
    'the server this test runs is started so (its inbound listener on a free port, put in the swaks command)',
  'npm test': 'the suite itself',
  'TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npm test': 'the suite itself',
  'SCREENSHOTS=1 npx node --test test/dashboard.test.ts && ls test/screenshots/': 'the browser suite itself',
  'npm pack': 'test/packaging.test.ts packs and installs the package',
  'npm install -g ./postwire-0.1.0.tgz': 'installs globally; test/packaging.test.ts installs the packed file',
  'cd /somewhere && postwire serve': 'a global install; test/packaging.test.ts starts it',
  'docker build -t postwire .': 'needs a container engine (packaging/check-image.sh, by hand)',
  'docker run -d --name postwire -p 3000:3000 -v postwire-data:/data postwire': 'needs a container engine',
  'docker logs postwire': 'needs a container engine',
  'cat > .env <<EOF': 'writes the compose settings; needs docker compose to use them',
  'chmod 600 .env': 'the compose settings',
  'docker compose up -d --build': 'needs a container engine',
  'docker compose logs api': 'needs a container engine',
  'docker compose up -d --scale worker=3': 'needs a container engine',
  'install -d -m 0700 /etc/postwire && install -m 0600 /dev/null /etc/postwire/postwire.env':
    'writes under /etc (systemd setup)',
  'cp packaging/postwire.service /etc/systemd/system/': 'systemd setup',
  'systemctl daemon-reload && systemctl enable --now postwire': 'needs systemd',
  'journalctl -u postwire': 'needs systemd',
  'npm run postwire -- serve [--no-worker] [--no-inbound]': 'runs until stopped; the server here is one',
  'npm run postwire -- worker [--no-inbound]': 'runs until stopped; test/main.test.ts runs workers',
  'postwire backup /backups/postwire-2026-11-26.db': 'a global install, writing to /backups',
  'pg_dump --format=custom --file=/backups/postwire-2026-11-26.dump "$DATABASE_URL"':
    'PostgreSQL tools, writing to /backups',
  'createdb --host=db.internal --username=postgres postwire_restored': 'a PostgreSQL host of the example',
  'pg_restore --no-owner --no-privileges --dbname="postgres://postwire@db.internal/postwire_restored" \\':
    'a PostgreSQL host of the example',
  'curl -s -X POST "$POSTWIRE/reputation/resume" -H "Authorization: Bearer $KEY" \\':
    'resumes a pause, and nothing is paused on the server here (test/reputation.test.ts pauses and resumes)',
  'rm -f "$POSTWIRE_DATA_DIR/postwire.db-wal" "$POSTWIRE_DATA_DIR/postwire.db-shm"':
    'a restore step: test/db-tools.test.ts restores a backup',
  'chmod 600 "$POSTWIRE_DATA_DIR/postwire.db" "$POSTWIRE_DATA_DIR/encryption.key"':
    'a restore step: test/db-tools.test.ts restores a backup',
};

/** Why a command is not run here, or undefined when it must run. */
function whyNotRun(command: DocCommand): string | undefined {
  if (command.text.includes('…')) return 'holds a value from an earlier answer or a credential (…)';
  if (/^15 3 \* \* \* /.test(command.name)) return 'a crontab line';
  if (/^cp \/backups\//.test(command.name)) return 'a restore step from /backups';
  if (command.text.includes('smtp.postwire.example')) return "a server of the example's own";
  return NOT_RUN[command.name];
}

/**
 * The README's walkthrough as it reads: the webhook section's send bounces at its new `+tag` (the first
 * send's address is suppressed by then), and nothing it sent was suppressed.
 */
async function walkthroughEnds(url: string, key: string): Promise<void> {
  const events = async (type: string) => {
    const response = await fetch(`${url}/v1/events?type=${type}`, {
      headers: { authorization: `Bearer ${key}` },
    });
    return ((await response.json()) as { data: Array<{ data: { recipient?: string } }> }).data;
  };
  await until(
    async () =>
      (await events('email.bounced')).some(
        (event) => event.data.recipient === 'bounced+webhook@example.test',
      ),
    20_000,
    "the walkthrough's second send to bounce",
  );
  assert.deepEqual(await events('email.suppressed'), []);
}

test('every shell command in README.md and docs/ runs as written, or says why it cannot here', async (t) => {
  const commands = documents().flatMap(commandsOf);
  assert.ok(commands.length > 80, `only ${commands.length} commands found`);
  const unlisted = commands.filter((command) => command.name in NOT_RUN === false && !whyNotRun(command));
  const runnable = unlisted.filter(
    (command) =>
      /^(curl |npm run (--silent )?postwire -- |swaks )/.test(command.name) ||
      command.name.startsWith('export '),
  );
  assert.deepEqual(
    unlisted
      .filter((command) => !runnable.includes(command))
      .map((command) => `${command.file}: ${command.name}`),
    [],
    'commands neither run by this test nor listed in NOT_RUN',
  );
  const listedButGone = Object.keys(NOT_RUN).filter(
    (name) => !commands.some((command) => command.name === name),
  );
  assert.deepEqual(listedButGone, [], 'NOT_RUN lists commands the docs no longer have');

  const dataDir = mkdtempSync(path.join(tmpdir(), 'postwire-docs-'));
  const workDir = mkdtempSync(path.join(tmpdir(), 'postwire-docs-cwd-'));
  const env = {
    POSTWIRE_DATA_DIR: dataDir,
    POSTWIRE_ENCRYPTION_KEY: 'ab'.repeat(32),
    HOME: process.env.HOME,
    // docs/api/engagement.md: tracking needs it, as it says.
    PUBLIC_URL: 'https://mail.acme.example',
    // docs/api/receiving.md: receiving needs it, as it says (its SMTP listener on a port the kernel picks, its local path
    // in capture mode, where test names verify without DNS).
    INBOUND_MX_HOST: 'mx.acme.test',
    INBOUND_SMTP_PORT: '0',
    // docs/api/submission.md's local quick-start.
    SUBMISSION_PORT: '0',
    SUBMISSION_ALLOW_PLAIN_LOOPBACK: 'true',
  };
  const server = await startServerProcess(env);
  t.after(async () => {
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(workDir, { recursive: true, force: true });
  });
  // The commands name the documented ports; they are run against the ones the kernel gave.
  const submissionPort = await submissionSmtpPort(server);
  const inboundPort = await inboundSmtpPort(server);
  const key = /Your API key \(shown once\): (pw_[A-Za-z0-9_-]+)/.exec(server.stdout())![1]!;
  const shellEnv = childEnv({ ...env, POSTWIRE: `${server.url}/v1`, KEY: key, REPO: REPO_ROOT });

  for (const command of runnable) {
    if (command.name.startsWith('export ')) continue; // the environment above is what it sets
    // The CLI's optional arguments, `[--json]`, are notation; as written means without them.
    // `npm run postwire -- …` is `node src/cli.ts …` (package.json), run so here to spare npm's start-up; in
    // a directory of its own, where `backup` writes its file.
    const shell = command.text.startsWith('npm ')
      ? command.text
          .replace(/ \[[^\]]*\]/g, '')
          .replace(/^npm run (--silent )?postwire --/, `"${process.execPath}" "$REPO/src/cli.ts"`)
      : command.text
          .replace('127.0.0.1:2587', `127.0.0.1:${submissionPort}`)
          .replace('127.0.0.1:2525', `127.0.0.1:${inboundPort}`);
    const { stdout } = await run('bash', ['-c', shell], { cwd: workDir, env: shellEnv }).catch(
      (error: { stdout: string; stderr: string }) => {
        throw new Error(`${command.file}: ${command.text}\nfailed:\n${error.stdout}\n${error.stderr}`);
      },
    );
    if (command.file === 'README.md' && command.text.includes('bounced+webhook@example.test')) {
      await walkthroughEnds(server.url, key);
    }
    if (/ backup /.test(command.text)) assert.ok(existsSync(path.join(workDir, 'backup/postwire.db')));
    if (command.name.startsWith('swaks ')) assert.match(stdout, /<- +250 .*queued as (msg|inb)_/, stdout);
    if (command.name.includes('/domains/acme.test/verify')) {
      assert.equal(JSON.parse(stdout).status, 'verified', stdout);
    }
    if (command.name.startsWith('curl ')) {
      const answer = JSON.parse(stdout);
      assert.equal(answer.error, undefined, `${command.file}: ${command.text}\n→ ${stdout}`);
    }
  }
});
