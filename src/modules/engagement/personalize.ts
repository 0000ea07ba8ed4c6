import type { EmailRecord } from '../emails/emails.repo.ts';
import type { TrackingSettings } from '../emails/tracking.ts';
import { addOpenPixel, fillUnsubscribeUrl, rewriteLinks } from '../emails/tracked-html.ts';
import type { EngagementLinks } from './tokens.ts';

export const RFC8058_BODY = 'List-Unsubscribe=One-Click';

/**
 * One recipient's copy of an email: its links pointed at its click URLs, its open pixel, its unsubscribe URL
 * in the List-Unsubscribe headers (RFC 8058) and wherever the sender wrote `{{ unsubscribe_url }}`. Built at
 * send time for each attempt, never stored.
 */
export function personalize(
  email: EmailRecord,
  recipientId: string,
  settings: TrackingSettings,
  links: EngagementLinks,
): EmailRecord {
  let { html, text } = email;
  const headers = { ...email.headers };
  if (html !== null && settings.clicks && settings.links.length > 0) {
    html = rewriteLinks(html, settings.links, (index) => links.url('click', recipientId, index));
  }
  if (settings.unsubscribe) {
    const url = links.url('unsubscribe', recipientId);
    if (html !== null) html = fillUnsubscribeUrl(html, url, true);
    if (text !== null) text = fillUnsubscribeUrl(text, url, false);
    const mailto = links.mailto(recipientId);
    headers['List-Unsubscribe'] = mailto ? `<${url}>, <${mailto}>` : `<${url}>`;
    headers['List-Unsubscribe-Post'] = RFC8058_BODY;
  }
  if (html !== null && settings.opens) html = addOpenPixel(html, links.url('open', recipientId));
  return { ...email, html, text, headers };
}
