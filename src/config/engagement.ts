// Tracking and unsubscribe: the public URL their links are built on, and what a send gets by default.
import { boolean, custom, rawValue, type ReadContext, section } from '../lib/settings.ts';

export const ENGAGEMENT_SETTINGS = section('Tracking and unsubscribe', {
  publicUrl: custom('PUBLIC_URL', {
    default: 'unset',
    description:
      "the base URL recipients' mail clients reach; tracking and unsubscribe links are built on it",
    details:
      'for example `https://mail.acme.example`. Served by the API process: open pixels (`/o/…`), click ' +
      'redirects (`/c/…`) and one-click unsubscribe (`/u/…`). Unset: a send asking for tracking or unsubscribe is a 422 ' +
      "`public_url_missing`. Workers need it too (they build each recipient's copy)",
    read: publicUrl,
  }),
  engagement: {
    trackOpens: boolean('TRACK_OPENS', {
      default: false,
      description: 'what a send gets when it does not say `tracking.opens`; `true` needs `PUBLIC_URL`',
    }),
    trackClicks: boolean('TRACK_CLICKS', {
      default: false,
      description: 'what a send gets when it does not say `tracking.clicks`; `true` needs `PUBLIC_URL`',
    }),
    listUnsubscribe: boolean('LIST_UNSUBSCRIBE', {
      default: false,
      description: 'what a send gets when it does not say `unsubscribe`; `true` needs `PUBLIC_URL`',
    }),
  },
});

/** PUBLIC_URL: an absolute http(s) URL without query or fragment; kept without its trailing slash. */
function publicUrl(context: ReadContext): string | undefined {
  const raw = rawValue(context, 'PUBLIC_URL');
  if (raw === undefined) return undefined;
  const url = URL.parse(raw);
  if (!url || !['http:', 'https:'].includes(url.protocol) || url.search || url.hash || url.username) {
    context.problems.push(
      `PUBLIC_URL must be an http(s) URL such as https://mail.acme.example, got '${raw}'.`,
    );
    return undefined;
  }
  return url.href.replace(/\/+$/, '');
}
