import type { EmailRecord } from '../emails/emails.repo.ts';
import type { TrackingSettings } from '../emails/tracking.ts';
import { addOpenPixel, fillUnsubscribeUrl, rewriteLinks } from '../emails/tracked-html.ts';
import { rewriteSubmittedHtml } from '../emails/submitted-html.ts';
import type { EngagementLinks } from './tokens.ts';

export const RFC8058_BODY = 'List-Unsubscribe=One-Click';

/**
 * One recipient's copy of an email: its links pointed at its click URLs, its open pixel, its unsubscribe URL
 * in the List-Unsubscribe headers (RFC 8058) and wherever the sender wrote `{{ unsubscribe_url }}`. Built at
 * send time for each attempt, never stored.
 */
export async function personalize(
  email: EmailRecord,
  recipientId: string,
  settings: TrackingSettings,
  links: EngagementLinks,
): Promise<EmailRecord> {
  let { html, text, submitted } = email;
  const headers = { ...email.headers };
  const withClicks = (content: string): string =>
    settings.clicks && settings.links.length > 0
      ? rewriteLinks(content, settings.links, (index) => links.url('click', recipientId, index))
      : content;
  const withPixel = (content: string): string =>
    settings.opens ? addOpenPixel(content, links.url('open', recipientId)) : content;
  if (html !== null) html = withClicks(html);
  if (settings.unsubscribe) {
    const url = links.url('unsubscribe', recipientId);
    if (html !== null) html = fillUnsubscribeUrl(html, url, true);
    if (text !== null) text = fillUnsubscribeUrl(text, url, false);
    const mailto = links.mailto(recipientId);
    headers['List-Unsubscribe'] = mailto ? `<${url}>, <${mailto}>` : `<${url}>`;
    headers['List-Unsubscribe-Post'] = RFC8058_BODY;
  }
  if (html !== null) html = withPixel(html);
  // An SMTP submission travels as written: only its html part(s) are tracked, re-encoded in place (its
  // `{{ unsubscribe_url }}` is the application's text, left as written).
  if (submitted !== undefined && (settings.clicks || settings.opens)) {
    submitted = [
      await rewriteSubmittedHtml(Buffer.concat(submitted), (content) => withPixel(withClicks(content))),
    ];
  }
  return { ...email, html, text, headers, submitted };
}
