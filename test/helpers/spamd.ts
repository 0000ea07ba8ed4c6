import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { chmod, chown, copyFile, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { join } from 'node:path';
import { freePort } from './process.ts';
import { until } from './until.ts';

// A real SpamAssassin per test file: a private spamd (Debian's `spamd` package, which pulls in `spamassassin`)
// on 127.0.0.1 and a free port, run as a child process in a fresh directory of its own, so the spam verdicts
// tests check are SpamAssassin's own.
//
// Offline and deterministic: local tests only (-L: no DNS blocklists, no Razor, Pyzor or DCC), no Bayes, no
// user preferences (-x). The rules are the ones Debian ships in /usr/share/spamassassin, which spamd reads
// when sa-update has never put newer ones in /var/lib/spamassassin (it cannot here: no network; where it has,
// spamd reads those), so nothing needs downloading or compiling. The site configuration is the instance's own: the system's plugin list
// (/etc/spamassassin/*.pre) without sa-compile.pre, whose Rule2XSBody plugin wants rules compiled by
// sa-compile and logs an error for each missing one; and a local.cf of ours, so the system's local.cf never
// changes a score a test expects.

const SPAMD = '/usr/sbin/spamd';
const SYSTEM_SITE_CONFIG = '/etc/spamassassin';

/** Whether spamd is installed (`apt-get install -y spamd`). */
export function spamdAvailable(): boolean {
  return existsSync(SPAMD);
}

export interface TestSpamd {
  /** It listens on 127.0.0.1:<port>. */
  port: number;
  /** `spamd://127.0.0.1:<port>`: what SPAMD_URL would say. */
  url: string;
  /** The instance's directory (site config, home); removed by close(). */
  directory: string;
  /** The spamd parent's process id, which is also its process group's. */
  pid: number;
  /** What spamd has written to stderr so far (its log), the last 64 KiB. */
  log(): string;
  /** Stops spamd and its children, waits until they are gone, and removes the directory. */
  close(): Promise<void>;
}

const LOCAL_CF = `# A private test instance of spamd, written by test/helpers/spamd.ts.
use_bayes 0
bayes_auto_learn 0
skip_rbl_checks 1
required_score 5.0
`;

/** The most of spamd's log kept in memory. */
const LOG_BYTES = 64 * 1024;

// Instances started and not yet closed: on exit (a test that failed before close) their process groups are
// killed and their directories removed, so no spamd outlives the test process.
const running = new Map<number, string>();
process.on('exit', () => {
  for (const [pid, directory] of running) {
    trySignal(-pid, 'SIGKILL');
    rmSync(directory, { recursive: true, force: true });
  }
});

/**
 * Starts a private spamd and resolves once it answers a PING over its protocol. Loading the rules takes a few
 * seconds (longer on a busy machine): `timeoutMs` bounds the wait.
 */
export async function startSpamd(timeoutMs = 60_000): Promise<TestSpamd> {
  if (!spamdAvailable()) throw new Error(`startSpamd needs ${SPAMD} (apt-get install -y spamd)`);
  // Under /tmp with 0755 all the way down: spamd drops to nobody when started as root, and nobody must read
  // the site configuration and write its home.
  const directory = await mkdtemp('/tmp/postwire-spamd-');
  try {
    await chmod(directory, 0o755);
    const site = join(directory, 'site');
    const home = join(directory, 'home');
    await mkdir(site, { mode: 0o755 });
    await mkdir(home, { mode: 0o755 });
    const asRoot = process.getuid?.() === 0;
    if (asRoot) {
      const nobody = nobodyIds();
      await chown(home, nobody.uid, nobody.gid);
    }
    for (const name of readdirSync(SYSTEM_SITE_CONFIG)) {
      if (name.endsWith('.pre') && name !== 'sa-compile.pre') {
        await copyFile(join(SYSTEM_SITE_CONFIG, name), join(site, name));
      }
    }
    await writeFile(join(site, 'local.cf'), LOCAL_CF);

    // The port is found free by binding port 0 and closing; another process may take it before spamd binds
    // it, which ends spamd at once: then try another.
    for (let attempt = 1; ; attempt += 1) {
      const port = await freePort();
      const args = [
        '--local',
        '--nouser-config',
        '--syslog=stderr',
        `--listen=127.0.0.1:${port}`,
        `--siteconfigpath=${site}`,
        `--helper-home-dir=${home}`,
        // Tests check a message or two at a time; fewer children start faster.
        '--max-children=2',
        '--min-children=1',
        '--min-spare=1',
        '--max-spare=1',
        ...(asRoot ? ['--username=nobody'] : []),
      ];
      const child = spawn(SPAMD, args, {
        cwd: directory,
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin', LC_ALL: 'C', HOME: home },
        stdio: ['ignore', 'pipe', 'pipe'],
        // Its own process group: close() and the exit handler signal spamd and its children together.
        detached: true,
      });
      const pid = child.pid;
      if (pid === undefined) throw new Error(`could not run ${SPAMD}`);
      running.set(pid, directory);
      let log = '';
      const keep = (chunk: Buffer) => {
        log = (log + chunk.toString('utf8')).slice(-LOG_BYTES);
      };
      child.stdout!.on('data', keep);
      child.stderr!.on('data', keep);
      let exited: number | null | undefined;
      child.on('exit', (code, signal) => {
        exited = code ?? (signal ? -1 : null);
      });
      try {
        await until(
          async () => {
            if (exited !== undefined) throw new Error(`spamd exited (${exited}) before answering:\n${log}`);
            return ping(port);
          },
          timeoutMs,
          () => `spamd on port ${port} to answer PING; its log:\n${log}`,
        );
      } catch (error) {
        await stop(child);
        if (attempt < 3 && /address already in use|could not create/i.test(log)) continue;
        throw error;
      }
      let closing: Promise<void> | undefined;
      return {
        port,
        url: `spamd://127.0.0.1:${port}`,
        directory,
        pid,
        log: () => log,
        close() {
          closing ??= stop(child).then(() => rm(directory, { recursive: true, force: true }));
          return closing;
        },
      };
    }
  } catch (error) {
    await rm(directory, { recursive: true, force: true });
    throw error;
  }
}

/** SIGTERM to spamd's group (the parent ends its children), SIGKILL when it is slow, then a last sweep. */
async function stop(child: ChildProcess): Promise<void> {
  const pid = child.pid!;
  if (child.exitCode === null && child.signalCode === null) {
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    trySignal(-pid, 'SIGTERM');
    const timer = setTimeout(() => trySignal(-pid, 'SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
  // A child the parent did not wait for would be left in the group: nothing of the instance may outlive it.
  await until(() => groupMembers(pid).length === 0, 5_000).catch(async () => {
    trySignal(-pid, 'SIGKILL');
    await until(() => groupMembers(pid).length === 0, 5_000, `spamd's processes (group ${pid}) to exit`);
  });
  running.delete(pid);
}

/** The live processes of a process group (a zombie waiting to be reaped counts as gone). */
export function groupMembers(group: number): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      // After the command's closing parenthesis: state, ppid, pgrp.
      const [state, , pgrp] = readFileSync(`/proc/${entry}/stat`, 'utf8')
        .replace(/^.*\) /s, '')
        .split(' ');
      if (state !== 'Z' && Number(pgrp) === group) found.push(Number(entry));
    } catch {
      // Gone meanwhile.
    }
  }
  return found;
}

/** Whether spamd on 127.0.0.1:port answers `PING SPAMC/1.5` with PONG (bounded to 2 s). */
export function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    let text = '';
    const done = (value: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(value);
    };
    const timer = setTimeout(() => done(false), 2000);
    socket.on('connect', () => socket.end('PING SPAMC/1.5\r\n\r\n'));
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
      if (/^SPAMD\/\d+\.\d+ 0 PONG\r\n/.test(text)) done(true);
      if (text.length > 1024) done(false);
    });
    socket.on('error', () => done(false));
    socket.on('close', () => done(/^SPAMD\/\d+\.\d+ 0 PONG/.test(text)));
  });
}

function nobodyIds(): { uid: number; gid: number } {
  const line = readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((entry) => entry.startsWith('nobody:'));
  const [, , uid, gid] = line?.split(':') ?? [];
  return { uid: Number(uid ?? 65534), gid: Number(gid ?? 65534) };
}

function trySignal(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // Already gone.
  }
}
