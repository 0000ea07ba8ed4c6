import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { DomainError } from '../../lib/errors.ts';
import type { HtmlReply, PublicRoutes } from '../engagement/engagement.routes.ts';
import { PREFERENCES_PATH } from '../engagement/tokens.ts';
import { preferencesPage, problemPage } from './preferences.page.ts';
import type { PreferenceLookup, PreferenceService } from './preferences.service.ts';

// The preference page on PUBLIC_URL, registered inside the engagement routes' public scope (its rate limit,
// its text body parser, no API key). GET shows it, POST changes it and shows it again: no redirect at all.
// A POST is taken only with the page's own token in its form and, when the browser says where it came from
// (Sec-Fetch-Site), only from the page itself: another site cannot submit it for a person.

const NOT_FOUND = problemPage(
  'Link not found',
  'This preference link is not valid. Use the link in the newest email you received.',
);
const EXPIRED = problemPage(
  'Link expired',
  'This preference link is too old to use. The newest email you received has a link that works.',
);
const CROSS_SITE = problemPage(
  'Nothing changed',
  'This request did not come from the preference page, so nothing was changed. Open the link from your email and try again.',
);
const CHANGED_MEANWHILE = problemPage(
  'Nothing changed',
  'The topics changed while the page was open. Open the link again to see them as they are now.',
);

type Params = { Params: { token: string } };

/** The preference page's routes, for the engagement routes' public scope (`preferences` there). */
export const preferenceRoutes =
  (preferences: PreferenceService): PublicRoutes =>
  (scope: FastifyInstance, { html, schema }: { html: HtmlReply; schema: object }) => {
    const answerMissing = (reply: FastifyReply, found: Exclude<PreferenceLookup['found'], 'contact'>) =>
      found === 'expired' ? html(reply, 410, EXPIRED) : html(reply, 404, NOT_FOUND);

    scope.get<Params>(`${PREFERENCES_PATH}/:token`, { schema }, async (request, reply) => {
      const found = await preferences.lookup(request.params.token);
      if (found.found !== 'contact') return answerMissing(reply, found.found);
      return html(reply, 200, preferencesPage(request.params.token, found.preferences));
    });

    scope.post<Params>(`${PREFERENCES_PATH}/:token`, { schema }, async (request, reply) => {
      const { token } = request.params;
      const found = await preferences.lookup(token);
      if (found.found !== 'contact') return answerMissing(reply, found.found);
      const form = new URLSearchParams(typeof request.body === 'string' ? request.body : '');
      if (!fromThePage(request) || form.get('token') !== token) return html(reply, 403, CROSS_SITE);
      let change;
      try {
        change = await preferences.change(found.contact, found.preferences, form);
      } catch (error) {
        // The contact or one of its topics was deleted between the read and the write.
        if (error instanceof DomainError && error.kind === 'not_found')
          return html(reply, 409, CHANGED_MEANWHILE);
        throw error;
      }
      const now = await preferences.lookup(token);
      if (now.found !== 'contact') return answerMissing(reply, now.found);
      const status = change.done === 'refused' ? 400 : 200;
      return html(reply, status, preferencesPage(token, now.preferences, change));
    });
  };

/** False when the browser says the POST came from another site (a browser that says nothing is let through). */
function fromThePage(request: FastifyRequest): boolean {
  const site = request.headers['sec-fetch-site'];
  return site === undefined || site === 'same-origin' || site === 'none';
}
