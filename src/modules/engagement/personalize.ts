import type { EmailRecord } from '../emails/emails.repo.ts';
import type { TrackingSettings } from '../emails/tracking.ts';
import { fillUnsubscribeUrl, type HtmlTracking, trackedHtml } from '../emails/tracked-html.ts';
import { trackSubmission } from '../emails/submitted-html.ts';
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
  // The recipient's URLs, made here (they are signed with the process's secret); the html is rewritten with
  // them wherever it is (tracked-html.ts), a large submitted message's on a thread.
  const clicks: HtmlTracking = {
    links: settings.links,
    clickUrls: settings.clicks
      ? settings.links.map((_, index) => links.url('click', recipientId, index))
      : [],
  };
  const pixel: HtmlTracking = {
    links: [],
    clickUrls: [],
    openUrl: settings.opens ? links.url('open', recipientId) : undefined,
  };
  if (html !== null) html = trackedHtml(html, clicks);
  if (settings.unsubscribe) {
    const url = links.url('unsubscribe', recipientId);
    if (html !== null) html = fillUnsubscribeUrl(html, url, true);
    if (text !== null) text = fillUnsubscribeUrl(text, url, false);
    const mailto = links.mailto(recipientId);
    headers['List-Unsubscribe'] = mailto ? `<${url}>, <${mailto}>` : `<${url}>`;
    headers['List-Unsubscribe-Post'] = RFC8058_BODY;
  }
  if (html !== null) html = trackedHtml(html, pixel);
  // An SMTP submission travels as written: only its html part(s) are tracked, re-encoded in place (its
  // `{{ unsubscribe_url }}` is the application's text, left as written).
  if (submitted !== undefined && (settings.clicks || settings.opens)) {
    submitted = await trackSubmission(submitted, { ...clicks, openUrl: pixel.openUrl });
  }
  return { ...email, html, text, headers, submitted };
}
