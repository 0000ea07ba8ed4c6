// The HTTP port: taken first thing at a start, so that a port in use fails it before anything is written,
// and handed over to the API once everything it serves can be served.
import { createServer as createNetServer } from 'node:net';
import type { FastifyInstance } from 'fastify';

export interface ReservedPort {
  /** The port taken: the configured one, or the one the system chose for PORT=0. */
  port: number;
  release(): Promise<void>;
}

/** Takes the HTTP port at once, so that a port in use fails the start before anything is written. */
export async function reservePort(host: string, port: number, setting: string): Promise<ReservedPort> {
  // A client that connects meanwhile (a load balancer's probe, a retrying client) is dropped at once: a
  // connection left open would keep close() from finishing, and the start would hang before it listens.
  const server = createNetServer((socket) => socket.destroy());
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port, host, exclusive: true }, () => resolve());
  }).catch((error: unknown) => {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'EADDRINUSE' && code !== 'EACCES') throw error;
    throw new Error(
      `the HTTP port ${host}:${port} ${code === 'EADDRINUSE' ? 'is in use' : 'may not be used by this user'} ` +
        `(${code}): set ${setting} (or HOST) to a free one.`,
      { cause: error },
    );
  });
  const address = server.address();
  let released: Promise<void> | undefined;
  return {
    port: address && typeof address === 'object' ? address.port : port,
    release: () =>
      (released ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
      })),
  };
}

/**
 * The API takes over the reserved port. Fastify logs a line per address it listens on (each interface's for
 * 0.0.0.0); the process says it once, after the first start's key, so Fastify's lines are left out.
 */
export async function listenQuietly(
  app: FastifyInstance,
  reserved: ReservedPort,
  host: string,
): Promise<void> {
  await reserved.release();
  const level = app.log.level;
  if (['trace', 'debug', 'info'].includes(level)) app.log.level = 'warn';
  try {
    await app.listen({ port: reserved.port, host });
  } finally {
    app.log.level = level;
  }
}

export function listeningUrl(host: string, port: number): string {
  // A wildcard address is not something to type into a browser.
  const shown = host === '0.0.0.0' || host === '::' ? 'localhost' : host.includes(':') ? `[${host}]` : host;
  return `http://${shown}:${port}`;
}
