// The load of bench/large-messages.ts, on a thread of its own at the lowest CPU priority: what stands for the
// clients and the relay's receiving host, which run on other machines where Postwire is deployed. On the
// bench's one machine they would otherwise take a core from the server while it is measured: pushing 40 MiB
// over SMTP and, for the relay, scanning 40 MiB for the end of DATA cost as much CPU as the server's own work.
// The thread builds the messages first (before the probe starts), keeps the relay's sink, and sends one
// message when asked. `--load-priority normal` keeps it at the process's priority, to compare.
import { parentPort, workerData } from 'node:worker_threads';
import nodemailer from 'nodemailer';
import MailComposer from 'nodemailer/lib/mail-composer';
import { SMTPServer } from 'smtp-server';
import { lowerThreadPriority } from '../src/lib/thread-pool.ts';

export type LoadMode = 'capture' | 'relay' | 'received' | 'api';

/** What the bench tells the thread once the server listens. */
export interface LoadTarget {
  mode: LoadMode;
  url: string;
  key: string;
  /** The submission port, or the inbound listener's for `received`. */
  smtpPort: number;
  to: string;
  messages: number;
}

export type ToLoad = { send: number } | { close: true };
export type FromLoad =
  | { sinkPort: number }
  | { ready: true }
  | { sent: number; id: string }
  | { failed: string }
  | { closed: true };

/** The attachment's size: with base64 and the rest, the message is just under 40 MiB. */
const ATTACHMENT_BYTES = 29 * 1024 * 1024;
/** An API send's attachment: just under the 40 MiB of files an email may carry (MAX_ATTACHMENT_BYTES). */
const API_ATTACHMENT_BYTES = 40 * 1024 * 1024 - 64 * 1024;
const text = Array.from({ length: 2000 }, (_, line) => `Line ${line} of the figures — Grüße`).join('\n');
const html = `<p>${text.replace(/\n/g, '</p><p>')}</p>`;

/** A relay that takes every message and keeps nothing. */
async function startSink(): Promise<{ port: number; close(): Promise<void> }> {
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    size: 64 * 1024 * 1024,
    onData(stream, _session, callback) {
      stream.on('data', () => {});
      stream.on('end', () => callback());
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.server.address();
  return {
    port: typeof address === 'object' && address ? address.port : 0,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

async function build(target: LoadTarget): Promise<Array<() => Promise<string>>> {
  const { randomBytes } = await import('node:crypto');
  if (target.mode === 'api') {
    const content = randomBytes(API_ATTACHMENT_BYTES).toString('base64');
    return Array.from({ length: target.messages }, (_, i) => {
      const body = JSON.stringify({
        from: 'Acme <hello@acme.example>',
        to: [target.to],
        subject: `Figures ${i}`,
        text,
        html,
        attachments: [{ filename: 'figures.bin', content }],
      });
      return async () => {
        const response = await fetch(`${target.url}/v1/emails`, {
          method: 'POST',
          headers: { authorization: `Bearer ${target.key}`, 'content-type': 'application/json' },
          body,
        });
        const answer = (await response.json()) as { id?: string };
        if (response.status !== 202)
          throw new Error(`the send answered ${response.status}: ${JSON.stringify(answer)}`);
        return answer.id!;
      };
    });
  }
  const transport = nodemailer.createTransport({
    host: '127.0.0.1',
    port: target.smtpPort,
    ignoreTLS: true,
    ...(target.mode === 'received' ? {} : { auth: { user: 'bench', pass: target.key } }),
  });
  closers.push(async () => transport.close());
  const attachment = randomBytes(ATTACHMENT_BYTES);
  const sends: Array<() => Promise<string>> = [];
  for (let i = 0; i < target.messages; i++) {
    const raw = await new MailComposer({
      from: 'Acme <hello@acme.example>',
      to: target.to,
      subject: `Figures ${i}`,
      text,
      html,
      attachments: [{ filename: 'figures.bin', content: attachment }],
    })
      .compile()
      .build();
    sends.push(async () => {
      const info = await transport.sendMail({
        envelope: { from: 'hello@acme.example', to: [target.to] },
        raw,
      });
      return /queued as ((?:msg|inb)_[0-9a-z]+)/.exec(info.response)![1]!;
    });
  }
  return sends;
}

const closers: Array<() => Promise<void>> = [];

if (parentPort) {
  const port = parentPort;
  const post = (message: FromLoad) => port.postMessage(message);
  const { lowPriority } = workerData as { lowPriority: boolean };
  if (lowPriority) lowerThreadPriority();
  const sink = await startSink();
  closers.push(sink.close);
  post({ sinkPort: sink.port });
  let sends: Array<() => Promise<string>> = [];
  port.on('message', (message: LoadTarget | ToLoad) => {
    if ('mode' in message) {
      void build(message).then(
        (built) => {
          sends = built;
          post({ ready: true });
        },
        (error: unknown) => post({ failed: String(error) }),
      );
    } else if ('send' in message) {
      const index = message.send;
      void sends[index]!().then(
        (id) => post({ sent: index, id }),
        (error: unknown) => post({ failed: String(error) }),
      );
    } else {
      void Promise.all(closers.map((close) => close())).then(() => post({ closed: true }));
    }
  });
}
