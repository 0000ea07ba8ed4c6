import { isIP } from 'node:net';

/** spamd's own port (spamc's default). */
export const SPAMD_DEFAULT_PORT = 783;

export interface SpamdAddress {
  host: string;
  port: number;
}

/**
 * Where SpamAssassin's spamd listens, from SPAMD_URL: `spamd://host[:port]` or `tcp://host[:port]` (port 783
 * when absent); an IPv6 address in brackets. Anything else (another scheme, a path, a query, credentials, a
 * port out of range) is undefined: config reports it as a problem, so the client never sees one.
 */
export function parseSpamdUrl(text: string): SpamdAddress | undefined {
  let url: URL;
  try {
    url = new URL(text.trim());
  } catch {
    return undefined;
  }
  if (url.protocol !== 'spamd:' && url.protocol !== 'tcp:') return undefined;
  if (url.username || url.password || url.search || url.hash) return undefined;
  if (url.pathname !== '' && url.pathname !== '/') return undefined;
  const bracketed = /^\[(.*)\]$/.exec(url.hostname);
  const host = bracketed ? bracketed[1]! : url.hostname;
  if (host === '' || (bracketed && isIP(host) !== 6)) return undefined;
  const port = url.port === '' ? SPAMD_DEFAULT_PORT : Number(url.port);
  if (!Number.isInteger(port) || port < 1 || port > 65535) return undefined;
  return { host, port };
}
