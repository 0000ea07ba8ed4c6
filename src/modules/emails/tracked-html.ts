// The html rewriting tracking needs, done with a tokenizer-free scan of `<a …>` start tags: the html is the
// sender's, and the only change made is the value of an href (and an image added for opens). The same scan
// finds the links when an email is accepted (stored once per email) and replaces them when each recipient's
// copy is built (engagement/personalize.ts), so a link's index is the same both times.

/**
 * Links beyond this many in one email are left as they are (not tracked): a click token names a link by its
 * index in two base-32 characters (engagement/tokens.ts).
 */
export const MAX_TRACKED_LINKS = 32 ** 2;

/** What `{{ unsubscribe_url }}` stands for in a send's html and text until each recipient's copy is built. */
export const UNSUBSCRIBE_PLACEHOLDER = '{{ unsubscribe_url }}';
const UNSUBSCRIBE_VARIABLE = /\{\{\s*unsubscribe_url\s*\}\}/g;

const ANCHOR = /<a\b[^>]*>/gi;
const HREF = /(\shref\s*=\s*)(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+))/i;
const TRACK_OFF = /\sdata-postwire-track\s*=\s*(?:"off"|'off'|off(?=[\s/>]))/i;
const MAX_URL_LENGTH = 2048;

const ENTITIES: Record<string, string> = { amp: '&', quot: '"', apos: "'", lt: '<', gt: '>', nbsp: '\u00a0' };

/** An attribute value as a browser reads it: character references decoded. */
function decodeAttribute(value: string): string {
  return value.replace(/&(#x[0-9a-f]+|#\d+|[a-z]+);/gi, (whole, name: string) => {
    if (name[0] === '#') {
      const code =
        name[1] === 'x' || name[1] === 'X' ? parseInt(name.slice(2), 16) : parseInt(name.slice(1), 10);
      return code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : whole;
    }
    return ENTITIES[name.toLowerCase()] ?? whole;
  });
}

const escapeAttribute = (value: string): string =>
  value.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** The URL a link points to, if it is one to track: http(s), parseable, not too long. */
function trackable(raw: string): string | undefined {
  const url = decodeAttribute(raw).trim();
  if (!/^https?:\/\//i.test(url) || url.length > MAX_URL_LENGTH) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return undefined;
  }
  // Kept exactly as written when it can travel in a Location header as is; else in its encoded form.
  return /^[\x21-\x7e]+$/.test(url) ? url : parsed.href;
}

/** Calls `visit` for each trackable link of `html`; its answer (if any) replaces the href's value. */
function eachLink(html: string, visit: (url: string) => string | undefined): string {
  return html.replace(ANCHOR, (tag) => {
    if (TRACK_OFF.test(tag)) return tag;
    const href = HREF.exec(tag);
    if (!href) return tag;
    const url = trackable(href[2] ?? href[3] ?? href[4] ?? '');
    if (url === undefined) return tag;
    const replacement = visit(url);
    if (replacement === undefined) return tag;
    return tag.replace(HREF, `${href[1]}"${escapeAttribute(replacement)}"`);
  });
}

/** The distinct trackable URLs of the html's links, in order (at most MAX_TRACKED_LINKS). */
export function trackedLinks(html: string): string[] {
  const links: string[] = [];
  const seen = new Set<string>();
  eachLink(html, (url) => {
    if (!seen.has(url) && links.length < MAX_TRACKED_LINKS) {
      seen.add(url);
      links.push(url);
    }
    return undefined;
  });
  return links;
}

/** Points every stored link at its tracking URL; links not stored (or marked off) stay as they are. */
export function rewriteLinks(
  html: string,
  links: readonly string[],
  urlFor: (index: number) => string,
): string {
  const indexOf = new Map(links.map((url, index) => [url, index]));
  return eachLink(html, (url) => {
    const index = indexOf.get(url);
    return index === undefined ? undefined : urlFor(index);
  });
}

/** Adds the 1×1 open pixel at the end of the body. */
export function addOpenPixel(html: string, url: string): string {
  const pixel = `<img src="${escapeAttribute(url)}" width="1" height="1" alt="" style="display:block;width:1px;height:1px;border:0" />`;
  const end = html.search(/<\/body\s*>(?![\s\S]*<\/body\s*>)/i);
  return end === -1 ? html + pixel : html.slice(0, end) + pixel + html.slice(end);
}

/** Puts the recipient's unsubscribe URL where the sender wrote `{{ unsubscribe_url }}`. */
export function fillUnsubscribeUrl(content: string, url: string, html: boolean): string {
  const value = html ? escapeAttribute(url) : url;
  return content.replace(UNSUBSCRIBE_VARIABLE, () => value);
}

/**
 * How one recipient's html is tracked: each of `links` pointed at its click URL (`clickUrls[i]` for `links[i]`;
 * none when empty), and the open pixel at `openUrl` when given. Plain data, so a thread can apply it.
 */
export interface HtmlTracking {
  links: readonly string[];
  clickUrls: readonly string[];
  openUrl?: string | undefined;
}

/** The html with its links tracked, then its open pixel added (see HtmlTracking). */
export function trackedHtml(html: string, tracking: HtmlTracking): string {
  const clicked =
    tracking.clickUrls.length > 0
      ? rewriteLinks(html, tracking.links, (index) => tracking.clickUrls[index]!)
      : html;
  return tracking.openUrl ? addOpenPixel(clicked, tracking.openUrl) : clicked;
}
