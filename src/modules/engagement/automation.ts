// Whether a fetch of a tracking URL is a person or a machine. Opens and clicks are recorded either way; the
// `automated` flag lets senders count people only. What counts as automated (decided here, once):
// - Apple Mail Privacy Protection: its proxy fetches every image of every message on delivery, with the bare
//   user agent `Mozilla/5.0` and nothing else.
// - Link scanners and security gateways (Microsoft Safe Links and Office previews, Proofpoint, Mimecast,
//   Barracuda, Symantec, Cisco, Sophos, Trend Micro, Forcepoint, FortiGuard…), crawlers, HTTP libraries and
//   headless browsers, by their user agent; no user agent at all.
// - A prefetch the client announces (`Purpose: prefetch`, `Sec-Purpose: prefetch`).
// - Any fetch within a few seconds of the recipient's server accepting the message: no person opens and
//   clicks that fast; scanners that pass for a browser do.
// Gmail's and Yahoo's image proxies fetch when the person opens the message: those are human opens.

const AUTOMATED_AGENTS = [
  /bot\b|crawler|spider|slurp|preview/i,
  /^(curl|wget|python|go-http-client|java|okhttp|axios|node-fetch|undici|libwww|httpclient|apache-httpclient)/i,
  /python-requests|aiohttp|httpx|scrapy|headlesschrome|phantomjs|puppeteer|playwright/i,
  /safelinks|microsoft office|ms-office|msoffice|office365|outlook-android-link/i,
  /proofpoint|mimecast|barracuda|symantec|messagelabs|ironport|cisco|sophos|trend ?micro|forcepoint|fortiguard|zscaler|paloalto|checkpoint|virustotal|urlscan|appriver|bitdefender|kaspersky/i,
];

/** A fetch this soon after the recipient's server accepted the message is a machine's. */
export const AUTOMATED_WITHIN_MS = 2000;

export interface FetchSignals {
  userAgent: string | undefined;
  /** The `purpose` / `sec-purpose` / `x-moz` header, when sent. */
  purpose: string | undefined;
  /** When the fetch happened and when the recipient's server accepted the message (null: unknown). */
  at: Date;
  deliveredAt: string | null;
}

export function isAutomated(signals: FetchSignals): boolean {
  const agent = signals.userAgent?.trim() ?? '';
  if (agent === '' || agent === 'Mozilla/5.0') return true;
  if (AUTOMATED_AGENTS.some((pattern) => pattern.test(agent))) return true;
  if (signals.purpose && /prefetch|preview/i.test(signals.purpose)) return true;
  if (signals.deliveredAt !== null) {
    const since = signals.at.getTime() - Date.parse(signals.deliveredAt);
    if (since >= 0 && since < AUTOMATED_WITHIN_MS) return true;
  }
  return false;
}
