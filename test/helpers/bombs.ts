import { readFileSync } from 'node:fs';
import { Socket } from 'node:net';

// Hostile messages for the report reader, built in memory (each under the inbound listener's default 10 MiB
// limit, so the listener stores them), and a bare SMTP client that writes one in a single socket write: the
// test process stays idle while the server receives it, so what a test measures of the server's latency is
// the server's.

const CRLF = '\r\n';

/** A report's top header block, to the blank line, for a multipart/report with boundary `b`. */
const head = (subject: string, contentType: string) =>
  [
    'From: Mail Delivery System <MAILER-DAEMON@bomb.example>',
    `Subject: ${subject}`,
    'MIME-Version: 1.0',
    `Content-Type: ${contentType}`,
    '',
    '',
  ].join(CRLF);

const REPORT_TYPE = 'multipart/report; report-type=delivery-status; boundary="b"';

/** `parts` empty MIME parts (`--b` lines, 5 bytes each): 1.9 M of them is the 9.5 MB message. */
export function partsBomb(parts: number): Buffer {
  return Buffer.concat([
    Buffer.from(head('parts', REPORT_TYPE)),
    Buffer.alloc(parts * 5, `--b${CRLF}`),
    Buffer.from(`--b--${CRLF}`),
  ]);
}

/** A delivery-status part of `groups` recipient groups (61 bytes each): 150 k of them is 9.2 MB. */
export function groupsBomb(groups: number): Buffer {
  const group = `Final-Recipient: rfc822; x@y.example${CRLF}Action: failed${CRLF}${CRLF}`;
  return Buffer.concat([
    Buffer.from(head('groups', REPORT_TYPE)),
    Buffer.from(
      `--b${CRLF}Content-Type: message/delivery-status${CRLF}${CRLF}Reporting-MTA: dns; a${CRLF}${CRLF}`,
    ),
    Buffer.alloc(groups * group.length, group),
    Buffer.from(`--b--${CRLF}`),
  ]);
}

/** `lines` header lines (`X:1`, 5 bytes each) in the message's own header: 1.7 M of them is 8.5 MB. */
export function headerLinesBomb(lines: number): Buffer {
  return Buffer.concat([
    Buffer.from(`Subject: header lines${CRLF}`),
    Buffer.alloc(lines * 5, `X:1${CRLF}`),
    Buffer.from(`${CRLF}body${CRLF}`),
  ]);
}

/** One header line of `bytes` bytes. */
export function headerBytesBomb(bytes: number): Buffer {
  return Buffer.concat([
    Buffer.from(`Subject: header bytes${CRLF}X-Long: `),
    Buffer.alloc(bytes, 'a'),
    Buffer.from(`${CRLF}${CRLF}body${CRLF}`),
  ]);
}

/** Multiparts nested `levels` deep (each the only part of the one above), an attachment at the bottom. */
export function depthBomb(levels: number): Buffer {
  const open: string[] = [];
  const close: string[] = [];
  for (let level = 0; level < levels; level++) {
    open.push(`Content-Type: multipart/mixed; boundary="n${level}"${CRLF}${CRLF}--n${level}${CRLF}`);
    close.push(`${CRLF}--n${level}--${CRLF}`);
  }
  return Buffer.from(
    `Subject: depth${CRLF}MIME-Version: 1.0${CRLF}${open.join('')}` +
      `Content-Type: application/octet-stream${CRLF}${CRLF}x` +
      close.reverse().join(''),
  );
}

/**
 * Sends `raw` over SMTP from the null sender and resolves to the server's reply to the message (`250 …`).
 * The message goes in one write, not dot-stuffed: it must have no line that starts with a dot.
 */
export async function sendRawMessage(port: number, to: string, raw: Buffer): Promise<string> {
  if (raw.includes('\n.') || raw[0] === 0x2e) throw new Error('a line starts with a dot: not sent as is');
  const socket = new Socket();
  let buffered = '';
  let waiting: ((line: string) => void) | undefined;
  let failed: Error | undefined;
  const lines: string[] = [];
  // SMTP replies: `250-…` lines continue, `250 …` ends one.
  socket.setEncoding('utf8').on('data', (chunk: string) => {
    buffered += chunk;
    let end: number;
    while ((end = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, end).replace(/\r$/, '');
      buffered = buffered.slice(end + 1);
      if (/^\d{3}-/.test(line)) continue;
      lines.push(line);
    }
    if (waiting && lines.length > 0) {
      const next = waiting;
      waiting = undefined;
      next(lines.shift()!);
    }
  });
  socket.on('error', (error) => (failed = error));
  const reply = (): Promise<string> =>
    new Promise((resolve, reject) => {
      if (failed) return reject(failed);
      if (lines.length > 0) return resolve(lines.shift()!);
      waiting = resolve;
      socket.once('close', () => reject(failed ?? new Error('the connection closed')));
    });
  const expect = async (code: string): Promise<string> => {
    const line = await reply();
    if (!line.startsWith(code)) throw new Error(`expected ${code}, got: ${line}`);
    return line;
  };
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.connect(port, '127.0.0.1', () => {
      socket.off('error', reject);
      resolve();
    });
  });
  try {
    await expect('220');
    socket.write(`EHLO bomb.example${CRLF}`);
    await expect('250');
    socket.write(`MAIL FROM:<>${CRLF}`);
    await expect('250');
    socket.write(`RCPT TO:<${to}>${CRLF}`);
    await expect('250');
    socket.write(`DATA${CRLF}`);
    await expect('354');
    socket.write(raw);
    socket.write(raw.subarray(-2).toString() === CRLF ? `.${CRLF}` : `${CRLF}.${CRLF}`);
    const answer = await expect('250');
    socket.write(`QUIT${CRLF}`);
    return answer;
  } finally {
    socket.end();
  }
}

/** A process's resident memory now and at its peak, in MiB (Linux: /proc), or undefined elsewhere. */
export function processMemory(pid: number): { rssMb: number; peakMb: number } | undefined {
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return undefined;
  }
  const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rssMb: kb('VmRSS') / 1024, peakMb: kb('VmHWM') / 1024 };
}

/**
 * processMemory for a baseline a memory check stands on: a baseline that cannot be read fails the test,
 * naming why, rather than skipping the check in silence (these tests run where /proc is, Linux).
 */
export function baselineMemory(pid: number): { rssMb: number; peakMb: number } {
  const memory = processMemory(pid);
  if (!memory || !Number.isFinite(memory.rssMb)) {
    throw new Error(`the RSS of process ${pid} cannot be read from /proc/${pid}/status: no memory check`);
  }
  return memory;
}
