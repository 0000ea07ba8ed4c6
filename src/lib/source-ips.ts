// DIRECT_SOURCE_IPS (docs/guides/warm-up.md): the local addresses direct delivery sends from, each with the name
// it gives in EHLO (its PTR name) and, while it is new, its own warm-up schedule from a first day.
import { isIP } from 'node:net';
import { parseWarmupSchedule } from './warmup-schedule.ts';

export interface SourceIp {
  /** The local address connections are made from (nodemailer's `localAddress`). */
  address: string;
  /** The EHLO name from this address (its PTR name); MAIL_HOSTNAME when absent. */
  helo: string | undefined;
  /** Its warm-up's day 1 (a UTC day's start, ms); undefined: the address is warm. */
  warmupFrom: number | undefined;
  /** Its warm-up's daily allowances per large-provider destination; null: WARMUP_SCHEDULE's. */
  schedule: number[] | null;
}

/**
 * Whether `source` sends at `now`. An address whose warm-up starts on a later day is listed ahead of it (its
 * PTR and EHLO name set up, its warm-up to begin on a chosen day): until then no mail leaves from it.
 */
export const sendsAt = (source: SourceIp, now: number): boolean =>
  source.warmupFrom === undefined || now >= source.warmupFrom;

const HOST_NAME = /^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/i;

/**
 * `192.0.2.10 helo=mx1.example.com; 192.0.2.11 helo=mx2.example.com warmup=2026-11-28 schedule=50x2/10`:
 * entries separated by `;`, each an IP address and then, optionally, `helo=`, `warmup=` (its day 1) and
 * `schedule=` (with `warmup=`). Returns the list or why it is not one.
 */
export function parseSourceIps(value: string): SourceIp[] | string {
  const sources: SourceIp[] = [];
  for (const entry of value.split(';').map((part) => part.trim())) {
    if (entry === '') continue;
    const [address = '', ...options] = entry.split(/\s+/);
    if (isIP(address) === 0) return `${address} is not an IP address`;
    if (sources.some((source) => source.address === address)) return `${address} is listed twice`;
    const source: SourceIp = { address, helo: undefined, warmupFrom: undefined, schedule: null };
    for (const option of options) {
      const [name, setting = ''] = option.split(/=(.*)/s);
      if (name === 'helo' && HOST_NAME.test(setting)) source.helo = setting.toLowerCase();
      else if (name === 'warmup' && /^\d{4}-\d{2}-\d{2}$/.test(setting) && !isNaN(Date.parse(setting)))
        source.warmupFrom = Date.parse(`${setting}T00:00:00.000Z`);
      else if (name === 'schedule') {
        const schedule = parseWarmupSchedule(setting);
        if (typeof schedule === 'string') return `${address}'s schedule: ${schedule}`;
        source.schedule = schedule;
      } else
        return `${address}: \`${option}\` is not \`helo=<host name>\`, \`warmup=<YYYY-MM-DD>\` or \`schedule=<schedule>\``;
    }
    if (source.schedule && source.warmupFrom === undefined)
      return `${address} has a schedule but no \`warmup=<YYYY-MM-DD>\` (its day 1)`;
    sources.push(source);
  }
  return sources;
}
