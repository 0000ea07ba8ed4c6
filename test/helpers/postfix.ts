import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { chmod, chown, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { freePort } from './process.ts';
import { until } from './until.ts';

// A real Postfix per test, as the receiving side of Postwire's outgoing mail: what it accepts over SMTP and
// what its virtual(8) agent writes into a Maildir is what a real mail host gets, Received lines and all.
// Given users and relay, it is also the mail host that reports back: it bounces unknown users after
// accepting them and mails its delivery status notifications to the next hop the test names.
//
// Each instance lives in a fresh directory of its own (config, queue, data, Maildirs, log) and is run with
// `postfix -c DIR start|stop`; /etc/postfix/main.cf is neither read nor written. Postfix only demands that
// a non-default config directory be listed in alternate_config_directories of /etc/postfix/main.cf when an
// unprivileged user names it (mail_conf_suck skips that check for root), so as root it works on a machine
// where `apt-get install postfix` ran with debconf's 'No configuration' and there is no main.cf at all;
// the shared files it does use are the package's (/usr/lib/postfix, /etc/postfix/postfix-files, the
// postfix user and postdrop group).

const POSTFIX = '/usr/sbin/postfix';

/** Whether Postfix is installed and we can run an instance (it must be started as root). */
export function postfixAvailable(): boolean {
  return existsSync(POSTFIX) && process.getuid?.() === 0;
}

export interface TestPostfix {
  /** Its smtpd listens on 127.0.0.1:<port>. */
  port: number;
  /** The instance's own directory (etc/, queue/, data/, mail/, log/); removed by close(). */
  directory: string;
  /** The Postfix master's process id. */
  masterPid: number;
  /**
   * Messages delivered into the mailbox of `address`, as the raw bytes Postfix wrote (LF line ends, with its
   * Return-Path, X-Original-To, Delivered-To and Received lines), in delivery order. Resolves once `count`
   * have arrived (with all there are by then); rejects after `timeoutMs` (default 20 s) with the log's tail.
   */
  waitForMailbox(address: string, count: number, timeoutMs?: number): Promise<Buffer[]>;
  /** The instance's mail log so far (its maillog_file). */
  log(): string;
  /**
   * Points the transport map at other next hops (replacing `relay` as given to startPostfix), reloads the
   * instance, and resolves once every daemon that ran before is gone, so all mail from then on is routed by
   * the new map. For a next hop that only gets its port after this instance has started.
   */
  setRelay(relay: Record<string, string>): Promise<void>;
  /** Stops the instance, waits until none of its processes is left, and removes its directory. */
  close(): Promise<void>;
}

const DOMAIN = /^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)+$/;
const LOCAL_PART = /^[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?$/;
const NEXT_HOP = /^(\d{1,3}(?:\.\d{1,3}){3}|localhost|[a-z0-9.-]+):(\d{1,5})$/;

export interface PostfixOptions {
  /** The domains it takes mail for, each delivered into a Maildir of its own. */
  domains: string[];
  /**
   * The local parts that have a mailbox at every one of `domains`. Absent: any local part has one. Given:
   * mail for anyone else is still accepted (250), then bounced by virtual(8) as an unknown user, so the
   * envelope sender gets a genuine delivery status notification from Postfix's bounce daemon.
   */
  users?: string[];
  /**
   * Next hops by domain (`{ 'bounces.example.test': '127.0.0.1:2525' }`): what Postfix itself mails to a
   * domain here, such as its reports to an envelope sender there, goes to that host and port by SMTP.
   * Clients still cannot relay there, and mail for any other domain still ends in the error transport.
   */
  relay?: Record<string, string>;
  /**
   * Clients on 127.0.0.0/8 may send through it to the `relay` domains too, as a sender's own mail server
   * relays its users' mail to the recipient's MX (Postfix as a remote sender, for Postwire's inbound routes).
   * Mail for any other domain is still refused at RCPT.
   */
  relayFromClients?: boolean;
  /**
   * A smarthost (`relayhost`) that all mail for elsewhere goes through, with SASL AUTH over TLS, as a server
   * whose operator sends through a provider: clients on 127.0.0.0/8 may then send to any domain.
   */
  smarthost?: { host: string; port: number; username: string; password: string };
}

/**
 * Starts a private Postfix on 127.0.0.1 and a free port that accepts mail from 127.0.0.0/8 for any local
 * part at `domains` and refuses to relay anywhere else. Resolves once its smtpd answers with a banner.
 */
export async function startPostfix(options: PostfixOptions): Promise<TestPostfix> {
  if (!postfixAvailable()) throw new Error(`startPostfix needs ${POSTFIX} and root`);
  const domains = options.domains.map((domain) => domain.toLowerCase());
  if (domains.length === 0) throw new Error('startPostfix needs at least one domain');
  for (const domain of domains) {
    // The names go into main.cf and an inline: map, whose syntax ({ } , = and spaces) they must not reach.
    if (!DOMAIN.test(domain)) throw new Error(`startPostfix: not a plain domain name: ${domain}`);
  }
  const users = options.users?.map((user) => user.toLowerCase());
  if (users) {
    if (users.length === 0) throw new Error('startPostfix: users, when given, needs at least one local part');
    for (const user of users) {
      if (!LOCAL_PART.test(user)) throw new Error(`startPostfix: not a plain local part: ${user}`);
    }
  }
  let relay = relayEntries(options.relay ?? {});

  // Under /tmp, not os.tmpdir(): the postfix user and nobody must reach the queue and the Maildirs through
  // every parent directory, and the queue's UNIX sockets must stay within sun_path's 108 bytes.
  const directory = await mkdtemp('/tmp/postwire-postfix-');
  const etc = join(directory, 'etc');
  const queue = join(directory, 'queue');
  const mail = join(directory, 'mail');
  const logFile = join(directory, 'log', 'maillog');
  let masterPid = 0;
  const instance = { directory, masterPid: () => masterPid };
  running.add(instance);
  try {
    await chmod(directory, 0o755);
    await mkdir(etc);
    await mkdir(queue);
    await mkdir(join(directory, 'log'));
    const nobody = nobodyIds();
    await mkdir(mail);
    await chown(mail, nobody.uid, nobody.gid);
    const writeMainCf = () =>
      writeFile(
        join(etc, 'main.cf'),
        mainCf(
          directory,
          {
            domains,
            users,
            relay,
            relayFromClients: options.relayFromClients === true,
            smarthost: options.smarthost,
          },
          nobody,
        ),
      );
    await writeMainCf();

    // The port is found free by binding port 0 and closing; another process may take it before master
    // binds it, which fails the start: then try another.
    let port = 0;
    for (let attempt = 1; ; attempt += 1) {
      port = await freePort();
      await writeFile(join(etc, 'master.cf'), masterCf(port));
      const started = await run(['-c', etc, 'start']);
      if (started.code === 0) break;
      const tail = logTail(logFile);
      if (attempt < 3 && /address already in use/i.test(tail + started.output)) continue;
      throw new Error(`postfix start exited with ${started.code}: ${started.output}\n${tail}`);
    }
    masterPid = Number.parseInt(await readFile(join(queue, 'pid', 'master.pid'), 'utf8'), 10);
    if (!(masterPid > 0)) throw new Error('postfix start left no master pid');
    await waitForBanner(port, 15_000, () => logTail(logFile));

    let closing: Promise<void> | undefined;
    // What each domain's Maildir holds, read once per file: its recipient and bytes by file name.
    const read = new Map(domains.map((domain) => [domain, new Map<string, { to: string; raw: Buffer }>()]));
    return {
      port,
      directory,
      masterPid,
      log: () => (existsSync(logFile) ? readFileSync(logFile, 'utf8') : ''),
      async waitForMailbox(address, count, timeoutMs = 20_000) {
        const wanted = address.toLowerCase();
        const domain = wanted.slice(wanted.lastIndexOf('@') + 1);
        const known = wanted.includes('@') ? read.get(domain) : undefined;
        if (!known) throw new Error(`${address} is not at this instance's domains (${domains.join(', ')})`);
        // virtual(8) writes each recipient's copy into tmp/ and renames it into new/ when complete.
        const newDir = join(mail, domain, 'new');
        let found: Buffer[] = [];
        return until(
          async () => {
            const names = existsSync(newDir) ? await readdir(newDir) : [];
            for (const name of names) {
              if (known.has(name)) continue;
              const raw = await readFile(join(newDir, name));
              known.set(name, { to: deliveredTo(raw), raw });
            }
            found = [...known.entries()]
              .filter(([, message]) => message.to === wanted)
              .sort(([a], [b]) => maildirOrder(a, b))
              .map(([, message]) => message.raw);
            return found.length >= count && found;
          },
          timeoutMs,
          () =>
            `${count} messages for ${address}, got ${found.length}; Postfix log (tail):\n${logTail(logFile)}`,
        );
      },
      async setRelay(next) {
        relay = relayEntries(next);
        // Every daemon reads main.cf when it starts: those started from now on see the new map. The ones
        // running now (the resident qmgr, a trivial-rewrite holding its clients' connections) are told by
        // the reload to exit, and until they have, one of them could still route by the old map.
        const before = processesIn(directory)
          .filter((pid) => pid !== masterPid)
          .map((pid) => ({ pid, start: startTime(pid) }));
        await writeMainCf();
        // What `postfix reload` does once its checks are done (master(8): SIGHUP re-reads the configuration
        // and has the running daemons exit), without postfix-script's seconds of checking the install.
        process.kill(masterPid, 'SIGHUP');
        const gone = () => before.every(({ pid, start }) => !alive(pid) || startTime(pid) !== start);
        await until(
          gone,
          10_000,
          () => `the daemons to exit after the reload of ${directory}:\n${logTail(logFile)}`,
        );
      },
      close() {
        closing ??= stop(instance);
        return closing;
      },
    };
  } catch (error) {
    await stop(instance).catch(() => {});
    throw error;
  }
}

interface Instance {
  directory: string;
  masterPid(): number;
}

// Instances a test started and has not closed: on exit (a failed test that never reached close) their
// masters are told to stop, so no daemon outlives the test process.
const running = new Set<Instance>();
process.on('exit', () => {
  for (const instance of running) {
    const pid = instance.masterPid();
    // The master leads its own process group; SIGTERM to it ends the master and the daemons it ran.
    if (pid > 0) trySignal(-pid, 'SIGTERM');
    rmSync(instance.directory, { recursive: true, force: true });
  }
});

async function stop(instance: Instance): Promise<void> {
  // `postfix stop` waits for the master itself, but give up on it after a bounded time and kill its group
  // as postfix-script's own fallback does; then wait for every daemon of this instance to be gone (they
  // all work in its queue directory) before removing the directory under them.
  if (existsSync(join(instance.directory, 'etc', 'master.cf'))) {
    await run(['-c', join(instance.directory, 'etc'), 'stop']);
  }
  const pid = instance.masterPid();
  const gone = () => processesIn(instance.directory).length === 0;
  if (pid > 0) await until(() => !alive(pid), 10_000).catch(() => trySignal(-pid, 'SIGKILL'));
  await until(gone, 10_000).catch(async () => {
    const left = processesIn(instance.directory);
    for (const child of left) trySignal(child, 'SIGKILL');
    await until(
      gone,
      5_000,
      `postfix processes ${left.join(', ')} of ${instance.directory} to exit on close()`,
    );
  });
  running.delete(instance);
  await rm(instance.directory, { recursive: true, force: true });
}

/** The transport map's entries, `domain smtp:[host]:port`, from `relay` (checked for the inline: syntax). */
function relayEntries(relay: Record<string, string>): string[] {
  return Object.entries(relay).map(([domain, hop]) => {
    const name = domain.toLowerCase();
    if (!DOMAIN.test(name)) throw new Error(`startPostfix: relay for a domain that is not plain: ${domain}`);
    const match = NEXT_HOP.exec(hop.toLowerCase());
    if (!match) throw new Error(`startPostfix: relay for ${domain} must be host:port, got ${hop}`);
    // [host]: this host itself, not its MX records (there is no DNS here anyway).
    return `${name}=smtp:[${match[1]}]:${match[2]}`;
  });
}

function mainCf(
  directory: string,
  options: {
    domains: string[];
    users: string[] | undefined;
    relay: string[];
    relayFromClients: boolean;
    smarthost: PostfixOptions['smarthost'];
  },
  nobody: { uid: number; gid: number },
): string {
  const { domains, users, relay, relayFromClients, smarthost } = options;
  if (smarthost) {
    for (const value of [smarthost.host, smarthost.username, smarthost.password]) {
      // They go into an inline: map, whose syntax ({ } , = and spaces) they must not reach.
      if (!/^[A-Za-z0-9._@:-]+$/.test(value))
        throw new Error(`startPostfix: smarthost value not plain: ${value}`);
    }
  }
  const hop = smarthost ? `[${smarthost.host}]:${smarthost.port}` : '';
  const relayed = relay.map((entry) => entry.slice(0, entry.indexOf('=')));
  const mailboxes = users
    ? domains.flatMap((domain) => users.map((user) => `${user}@${domain}=${domain}/`))
    : domains.map((domain) => `@${domain}=${domain}/`);
  return `# A private test instance of Postfix, written by test/helpers/postfix.ts.
compatibility_level = 3.6
queue_directory = ${directory}/queue
data_directory = ${directory}/data
maillog_file = ${directory}/log/maillog
maillog_file_prefixes = ${directory}/log

inet_interfaces = 127.0.0.1
inet_protocols = ipv4
myhostname = mx.receiver.test
mydomain = receiver.test
myorigin = $myhostname
mynetworks = 127.0.0.0/8
smtpd_banner = $myhostname ESMTP Postfix (test instance)
smtputf8_enable = yes
message_size_limit = 52428800
# Each Maildir message is a file of its own: no mailbox size to cap (0: none).
virtual_mailbox_limit = 0
biff = no
# Accept as fast as mail comes: no throttling while the queue manager catches up.
in_flow_delay = 0

# Only the test's domains are this host's, delivered by virtual(8) into one Maildir per domain (virtual(8)
# refuses regular expression substitution in virtual_mailbox_maps, so no map can name a Maildir per any
# local part; the helper picks a recipient's messages by the Delivered-To line virtual(8) writes).
mydestination =
local_recipient_maps =
alias_maps =
alias_database =
virtual_mailbox_domains = ${domains.join(' ')}
virtual_mailbox_base = ${directory}/mail
virtual_mailbox_maps = inline:{ ${mailboxes.join(', ')} }
# With users listed, smtpd takes mail for the others too (it would refuse them at RCPT, and the client would
# get the bounce), so that virtual(8) bounces them after the fact and the bounce daemon reports it to the
# envelope sender as a delivery status notification (RFC 3464), as a mail host behind a gateway does.
smtpd_reject_unlisted_recipient = ${users ? 'no' : 'yes'}
virtual_uid_maps = static:${nobody.uid}
virtual_gid_maps = static:${nobody.gid}

# Nothing leaves but to the test's own next hops (transport_maps, \`relay\`): no relaying for any client, and
# anything queued for elsewhere (a bounce to a sender at no such hop) ends in the error transport, never the
# network. No DNS either.
transport_maps = ${relay.length > 0 ? `inline:{ ${relay.join(', ')} }` : ''}
smtpd_client_restrictions = permit_mynetworks, reject
smtpd_relay_restrictions = ${smarthost ? 'permit_mynetworks, ' : ''}reject_unauth_destination
smtpd_recipient_restrictions =
relay_domains = ${relayFromClients ? relayed.join(' ') : ''}
default_transport = ${smarthost ? 'smtp' : 'error:this test instance delivers nowhere else'}
relay_transport = error:this test instance delivers nowhere else
local_transport = error:this test instance has no local delivery
smtp_dns_support_level = disabled
lmtp_dns_support_level = disabled
${
  smarthost
    ? `
# Everything for elsewhere goes through the smarthost, authenticated (SASL PLAIN or LOGIN) and only over TLS.
relayhost = ${hop}
smtp_sasl_auth_enable = yes
smtp_sasl_password_maps = inline:{ ${hop}=${smarthost.username}:${smarthost.password} }
smtp_sasl_security_options = noanonymous
smtp_sasl_tls_security_options = noanonymous
smtp_tls_security_level = encrypt
`
    : ''
}smtpd_peername_lookup = no
`;
}

function masterCf(port: number): string {
  // Upstream's services, none chrooted (the instance has no chroot tree), smtpd on the test's port only,
  // postlogd for maillog_file; the smtp client only for transport_maps' next hops (everything else goes
  // to error: above), and no lmtp or local clients.
  return [
    `127.0.0.1:${port} inet n - n - - smtpd`,
    'pickup    unix  n - n 60    1 pickup',
    'cleanup   unix  n - n -     0 cleanup',
    'qmgr      unix  n - n 300   1 qmgr',
    'rewrite   unix  - - n -     - trivial-rewrite',
    'bounce    unix  - - n -     0 bounce',
    'defer     unix  - - n -     0 bounce',
    'trace     unix  - - n -     0 bounce',
    'verify    unix  - - n -     1 verify',
    'flush     unix  n - n 1000? 0 flush',
    'proxymap  unix  - - n -     - proxymap',
    'proxywrite unix - - n -     1 proxymap',
    'showq     unix  n - n -     - showq',
    'smtp      unix  - - n -     - smtp',
    // The TLS session cache and entropy the smtp client needs to speak TLS (a smarthost only takes AUTH over it).
    'tlsmgr    unix  - - n 1000? 1 tlsmgr',
    'error     unix  - - n -     - error',
    'retry     unix  - - n -     - error',
    'discard   unix  - - n -     - discard',
    'virtual   unix  - n n -     - virtual',
    'anvil     unix  - - n -     1 anvil',
    'scache    unix  - - n -     1 scache',
    'postlog   unix-dgram n - n - 1 postlogd',
    '',
  ].join('\n');
}

/** Runs the postfix command (no shell), bounded in time; resolves with its exit code and output. */
function run(args: string[], timeoutMs = 60_000): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(POSTFIX, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const output: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => output.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => output.push(chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    // 'exit', not 'close': the daemon `start` leaves behind could hold copies of the pipes open.
    child.on('exit', (code) => {
      clearTimeout(timer);
      child.stdout.destroy();
      child.stderr.destroy();
      resolve({ code, output: Buffer.concat(output).toString('utf8') });
    });
  });
}

/** Resolves once 127.0.0.1:port answers with a 220 greeting; rejects after timeoutMs. */
async function waitForBanner(port: number, timeoutMs: number, tail: () => string): Promise<void> {
  let last = '';
  const answered = async () => {
    const banner = await new Promise<string>((resolve) => {
      const socket = createConnection({ host: '127.0.0.1', port });
      let text = '';
      const done = (value: string) => {
        socket.destroy();
        resolve(value);
      };
      socket.setTimeout(2000, () => done(text));
      socket.on('data', (chunk: Buffer) => {
        text += chunk.toString('latin1');
        if (/^220 .*\r?\n/m.test(text)) {
          socket.end('QUIT\r\n');
          done(text);
        }
      });
      socket.on('error', (error) => done(`${text}${error.message}`));
      socket.on('close', () => done(text));
    });
    last = banner;
    return /^220 /m.test(banner);
  };
  await until(
    answered,
    timeoutMs,
    () => `a banner from Postfix on port ${port} (${last}); log (tail):\n${tail()}`,
  );
}

function deliveredTo(raw: Buffer): string {
  const end = raw.indexOf('\n\n');
  const header = raw.subarray(0, end === -1 ? raw.length : end).toString('utf8');
  const match = /^Delivered-To:[ \t]*(.*?)\s*$/im.exec(header);
  return (match?.[1] ?? '').toLowerCase();
}

// Maildir names start `<seconds>.V<dev>I<inode>M<microseconds>.`: their time orders deliveries.
function maildirOrder(a: string, b: string): number {
  const time = (name: string) => {
    const match = /^(\d+)\.[^.]*M(\d+)/.exec(name);
    return match ? Number(match[1]) * 1e6 + Number(match[2]) : Number.POSITIVE_INFINITY;
  };
  return time(a) - time(b) || (a < b ? -1 : a > b ? 1 : 0);
}

function logTail(file: string, lines = 40): string {
  if (!existsSync(file)) return '(no log yet)';
  return readFileSync(file, 'utf8')
    .split('\n')
    .slice(-lines - 1)
    .join('\n');
}

function nobodyIds(): { uid: number; gid: number } {
  const line = readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((entry) => entry.startsWith('nobody:'));
  const [, , uid, gid] = line?.split(':') ?? [];
  return { uid: Number(uid ?? 65534), gid: Number(gid ?? 65534) };
}

/** A process that exists and has not exited (a zombie waiting to be reaped counts as gone). */
function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/** Processes whose working directory is inside `directory`: Postfix's daemons all work in its queue. */
function processesIn(directory: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cwd = readlinkSync(`/proc/${entry}/cwd`);
      if ((cwd === directory || cwd.startsWith(`${directory}/`)) && alive(Number(entry))) {
        found.push(Number(entry));
      }
    } catch {
      // Gone meanwhile, or a kernel thread without a cwd.
    }
  }
  return found;
}

/** When a process started (field 22 of its stat, in clock ticks since boot): a pid reused later differs. */
function startTime(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8')
      .replace(/^.*\) /s, '')
      .split(' ')[19];
  } catch {
    return undefined;
  }
}

function trySignal(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // Already gone.
  }
}
