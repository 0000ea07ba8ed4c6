import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { createRateLimiter } from '../../http/rate-limit.ts';
import type { Clock } from '../../lib/clock.ts';
import type { EngagementService, FetchMeta } from './engagement.service.ts';
import { RFC8058_BODY } from './personalize.ts';
import { PREFERENCES_PATH, PUBLIC_PATHS } from './tokens.ts';

// The routes recipients' mail clients reach on PUBLIC_URL: no API key, hostile input assumed. A token is
// checked (HMAC, no query) before anything else; whatever does not verify is a small 404 page, never a
// redirect. Bodies of any type are read as text (at most 8 KiB) so a strange one is never an error of ours.
// They are not in the OpenAPI document: they serve images, redirects and pages to mail clients, not JSON.

/** The 43-byte transparent 1×1 GIF. */
export const PIXEL_GIF = Buffer.from(
  'R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw==',
  'base64',
);

const NO_CACHE = 'no-store, no-cache, must-revalidate, max-age=0, private';
const MAX_BODY = 8 * 1024;

const page = (title: string, body: string) =>
  `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><meta name="robots" content="noindex"><title>${title}</title><style>body{font:16px/1.5 system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem;color:#222}button{font:inherit;padding:.5rem 1.25rem;cursor:pointer}</style></head><body>${body}</body></html>`;

const NOT_FOUND_PAGE = page('Link not found', '<h1>Link not found</h1><p>This link is not valid.</p>');
/**
 * A line leading a broadcast copy's recipient to their preference page (relative: it is on the same public
 * surface, whatever PUBLIC_URL's path), or nothing. The token is base32: nothing in it needs escaping.
 */
const preferencesLink = (token: string | undefined) =>
  token === undefined
    ? ''
    : `<p><a href="../${PREFERENCES_PATH.slice(1)}/${token}">Choose which emails you get</a> on your preference page.</p>`;
const confirmPage = (preferences: string | undefined) =>
  page(
    'Unsubscribe',
    `<h1>Unsubscribe</h1><p>Stop receiving these emails at this address?</p><form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click"><button type="submit">Unsubscribe</button></form>${preferencesLink(preferences)}`,
  );
const donePage = (preferences: string | undefined) =>
  page(
    'Unsubscribed',
    `<h1>You are unsubscribed</h1><p>This address will not receive these emails any more.</p>${preferencesLink(preferences)}`,
  );
const BAD_REQUEST_PAGE = page(
  'Unsubscribe',
  `<h1>Nothing changed</h1><p>An unsubscribe request must carry <code>${RFC8058_BODY}</code>.</p>`,
);

const TokenParams = {
  type: 'object',
  properties: { token: { type: 'string', maxLength: 64 } },
  required: ['token'],
} as const;

function html(reply: FastifyReply, status: number, body: string): FastifyReply {
  return (
    reply
      .code(status)
      .header('cache-control', NO_CACHE)
      // Nothing may frame these pages: a framed unsubscribe button could be clicked for a person.
      .header(
        'content-security-policy',
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
      )
      .header('x-frame-options', 'DENY')
      .header('referrer-policy', 'no-referrer')
      .header('x-robots-tag', 'noindex')
      .type('text/html; charset=utf-8')
      .send(body)
  );
}

const metaOf = (request: FastifyRequest): FetchMeta => {
  const purpose = request.headers['sec-purpose'] ?? request.headers.purpose ?? request.headers['x-moz'];
  return {
    userAgent: request.headers['user-agent'],
    purpose: Array.isArray(purpose) ? purpose.join(',') : purpose,
  };
};

/** Whether a POST body carries RFC 8058's `List-Unsubscribe=One-Click` (form-urlencoded or multipart). */
export function isOneClickBody(body: unknown): boolean {
  if (typeof body !== 'string' || body.length === 0) return false;
  if (new URLSearchParams(body.trim()).get('List-Unsubscribe') === 'One-Click') return true;
  return /name="?List-Unsubscribe"?\r?\n(?:[^\r\n]+\r?\n)*\r?\nOne-Click\r?\n/i.test(body);
}

/** Sends an html page with the public routes' headers (no cache, a strict policy, never framed). */
export type HtmlReply = (reply: FastifyReply, status: number, body: string) => FastifyReply;

/** Registers routes in the public scope, with its html answer and the token path's schema. */
export type PublicRoutes = (scope: FastifyInstance, helpers: { html: HtmlReply; schema: object }) => void;

export async function registerEngagementRoutes(
  app: FastifyInstance,
  {
    engagement,
    clock,
    rateLimit,
    preferences,
  }: {
    engagement: EngagementService;
    clock: Clock;
    rateLimit: { limit: number; windowMs: number };
    /**
     * More public routes in this scope (its rate limit, body parser and 404 pages): the contacts' preference
     * page (preferences/preferences.routes.ts), given how these routes answer html.
     */
    preferences?: PublicRoutes | undefined;
  },
): Promise<void> {
  const limiter = createRateLimiter({ ...rateLimit, now: () => clock.now().getTime() });
  // Opens and clicks are written in batches: the database must outlive the last one.
  app.addHook('onClose', () => engagement.drain());
  await app.register(async (scope) => {
    scope.addHook('onRoute', (route) => {
      route.config = { ...route.config, public: true };
    });
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'string', bodyLimit: MAX_BODY }, (_request, body, done) =>
      done(null, body),
    );
    // Per client address: mail clients and their proxies fetch a lot, a flood from one place is refused.
    scope.addHook('onRequest', async (request, reply) => {
      const verdict = limiter.take(request.ip);
      if (verdict && verdict.remaining < 0) {
        reply.header('retry-after', verdict.resetSeconds);
        return reply
          .code(429)
          .header('cache-control', NO_CACHE)
          .type('text/plain; charset=utf-8')
          .send('Too many requests');
      }
    });

    const schema = { hide: true, params: TokenParams };
    // Path parameters that break the schema (a token over 64 characters) are a 404 page too, not a 422.
    const notFound = (reply: FastifyReply) => html(reply, 404, NOT_FOUND_PAGE);
    scope.setErrorHandler((error, request, reply) => {
      if ((error as { validation?: unknown }).validation) return notFound(reply);
      throw error;
    });

    preferences?.(scope, { html, schema });

    scope.get<{ Params: { token: string } }>(
      `${PUBLIC_PATHS.open}/:token`,
      { schema },
      async (request, reply) => {
        // HEAD (a scanner checking the link) answers like GET and records nothing.
        const found =
          request.method === 'HEAD'
            ? await engagement.known('open', request.params.token)
            : await engagement.open(request.params.token, metaOf(request));
        if (!found) return notFound(reply);
        return reply
          .code(200)
          .header('cache-control', NO_CACHE)
          .header('pragma', 'no-cache')
          .header('expires', '0')
          .type('image/gif')
          .send(PIXEL_GIF);
      },
    );

    scope.get<{ Params: { token: string } }>(
      `${PUBLIC_PATHS.click}/:token`,
      { schema },
      async (request, reply) => {
        const url = await engagement.click(request.params.token, metaOf(request), request.method !== 'HEAD');
        if (url === undefined) return notFound(reply);
        return reply
          .code(302)
          .header('cache-control', NO_CACHE)
          .header('referrer-policy', 'no-referrer')
          .redirect(url, 302);
      },
    );

    scope.get<{ Params: { token: string } }>(
      `${PUBLIC_PATHS.unsubscribe}/:token`,
      { schema },
      async (request, reply) => {
        // A page with a button: a link scanner following the URL unsubscribes nobody.
        const shown = await engagement.unsubscribePage(request.params.token);
        if (!shown) return notFound(reply);
        return html(reply, 200, confirmPage(shown.preferences));
      },
    );

    scope.post<{ Params: { token: string } }>(
      `${PUBLIC_PATHS.unsubscribe}/:token`,
      { schema },
      async (request, reply) => {
        if (!isOneClickBody(request.body)) {
          if (!(await engagement.known('unsubscribe', request.params.token))) return notFound(reply);
          return html(reply, 400, BAD_REQUEST_PAGE);
        }
        if (!(await engagement.unsubscribe(request.params.token))) return notFound(reply);
        const shown = await engagement.unsubscribePage(request.params.token);
        return html(reply, 200, donePage(shown?.preferences));
      },
    );
  });
}
