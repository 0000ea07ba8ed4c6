// DIRECT_SOURCE_IPS lists the local addresses direct delivery connects from. One this machine does not have (a
// typo, an address moved to another host, an interface not up yet) would fail every delivery attempt from it
// with EADDRNOTAVAIL until each message's retries ran out; a process that sends mail refuses to start instead.
import { createServer } from 'node:net';
import type { SourceIp } from '../lib/source-ips.ts';

/**
 * Binds a TCP socket to each listed address (port 0: any free one) and closes it; throws, naming the address
 * and the setting, at the first one the system refuses.
 */
export async function checkSourceAddresses(sources: readonly SourceIp[], setting: string): Promise<void> {
  for (const { address } of sources) {
    // Listening is the one way Node binds a TCP socket without connecting anywhere; nothing can connect to
    // it meanwhile that matters, and it is closed at once.
    const server = createServer((socket) => socket.destroy());
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host: address, port: 0, exclusive: true }, () => resolve());
    }).catch((error: unknown) => {
      const code = (error as NodeJS.ErrnoException).code ?? 'error';
      throw new Error(
        `${setting} lists ${address}, which mail cannot be sent from on this machine (${code}): ` +
          'assign the address to an interface here, or remove it from the list.',
        { cause: error },
      );
    });
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
