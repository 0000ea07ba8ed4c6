import { Resolver as DnsResolver } from 'node:dns/promises';
import { isIP } from 'node:net';
import { type Resolver, systemResolver } from './network-policy.ts';

/** An MX record; `port` only where something other than DNS chose one (DNS has no port for MX). */
export interface MxRecord {
  exchange: string;
  priority: number;
  port?: number;
}

/**
 * The DNS lookups Postwire makes itself: MX and addresses of recipients' mail servers (direct mode) and the
 * TXT and MX records of sending domains (verification). Errors carry the DNS `code`: ENOTFOUND (the name
 * does not exist), ENODATA (no record of that type), ETIMEOUT, ESERVFAIL, …
 */
export interface Dns {
  resolveMx(name: string): Promise<MxRecord[]>;
  /** Each TXT record as the list of its strings (join them for the value). */
  resolveTxt(name: string): Promise<string[][]>;
  /** A host's addresses; an empty list when it does not resolve (in time). */
  resolveAddresses: Resolver;
  /**
   * Records of a type mail authentication asks for (SPF, DKIM, DMARC, ARC of received mail), shaped as
   * node:dns's `resolve` gives them (A: strings, MX: `{ exchange, priority }`, TXT: lists of strings, …).
   * Errors as above: unlike resolveAddresses, a name that does not resolve is an error, with its code.
   */
  resolve(name: string, type: AuthRecordType): Promise<unknown[]>;
}

export type AuthRecordType = 'A' | 'AAAA' | 'MX' | 'TXT' | 'PTR' | 'CNAME';

export interface DnsOptions {
  /** `ip` or `ip:port` (`[v6]:port`) of the servers to ask (DNS_SERVERS); the system's when absent or empty. */
  servers?: readonly string[] | undefined;
  /** Per try. Default 2 s. */
  timeoutMs?: number;
  /** Tries per server. Default 2. */
  tries?: number;
}

/** `ip[:port]` as DNS_SERVERS takes it; undefined when it is not one. */
export function parseDnsServer(text: string): string | undefined {
  const value = text.trim();
  if (isIP(value)) return value;
  const v6 = /^\[([^\]]+)\](?::(\d{1,5}))?$/.exec(value);
  const v4 = /^([^:]+):(\d{1,5})$/.exec(value);
  const [host, port] = v6 ? [v6[1]!, v6[2]] : v4 ? [v4[1]!, v4[2]] : [undefined, undefined];
  if (host === undefined || !isIP(host)) return undefined;
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65535)) return undefined;
  return value;
}

/**
 * The one place DNS lookups are made from (direct mode's mail servers, domain verification), so one setting
 * (DNS_SERVERS) points them all at the operator's resolver. Without servers it asks the system's resolvers
 * (/etc/resolv.conf), and host addresses go through the system's lookup (getaddrinfo: /etc/hosts too).
 */
export function createDns(options: DnsOptions = {}): Dns {
  const resolver = new DnsResolver({ timeout: options.timeoutMs ?? 2000, tries: options.tries ?? 2 });
  const servers = options.servers?.filter((server) => server.length > 0) ?? [];
  if (servers.length > 0) resolver.setServers([...servers]);

  const resolveAddresses: Resolver =
    servers.length === 0
      ? systemResolver
      : async (host) => {
          // A names, then AAAA: the order direct mode tries them in; either may be missing.
          const [v4, v6] = await Promise.all([
            resolver.resolve4(host).catch((): string[] => []),
            resolver.resolve6(host).catch((): string[] => []),
          ]);
          return [...v4, ...v6];
        };

  return {
    resolveMx: async (name) =>
      (await resolver.resolveMx(name)).map((record) => ({
        exchange: record.exchange,
        priority: record.priority,
      })),
    resolveTxt: (name) => resolver.resolveTxt(name),
    resolveAddresses,
    resolve: (name, type) => resolver.resolve(name, type) as Promise<unknown[]>,
  };
}
