import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { FastifySwaggerUiOptions } from '@fastify/swagger-ui';
import { DASHBOARD_DIR } from './dashboard.routes.ts';

/**
 * The one inline style Swagger UI writes, inside its own logo's SVG, which the page replaces with Postwire's
 * at once: allowed by its hash, as the single exception to "styles only from files".
 */
const SWAGGER_LOGO_STYLE = '.logo_small_svg__cls-2{fill:#fff}.logo_small_svg__cls-3{fill:#85ea2d}';

/**
 * The policy of `/docs` and every file under it. The page shares its origin with the dashboard, whose key
 * sits in sessionStorage: nothing may frame it (no clickjacking of "Try it out"), and it runs only the Swagger
 * UI files this server serves — its bundle, its initializer and its stylesheets, no inline script, no eval.
 * The logo is a data: URL; "Try it out" calls this origin only. What it needs was found by running it in
 * Chromium with this policy until no violation was reported (test/docs.test.ts keeps it so).
 */
export const DOCS_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  `style-src 'self' 'sha256-${createHash('sha256').update(SWAGGER_LOGO_STYLE).digest('base64')}'`,
  "img-src 'self' data:",
  "font-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "object-src 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** Where the API reference leads back to. */
const DASHBOARD_HOME = '/dashboard/';

/**
 * The way back to the dashboard, added to Swagger UI's top bar once it renders: the logo becomes a link to it
 * and a "Dashboard" link follows it. A file of its own (the `theme.js` the library serves under `/docs`), as
 * the policy allows no inline script. The library's `logo.href` does not do it: @fastify/swagger-ui 6 sets
 * `href` on the logo's <img>, leaving the link around it without one.
 */
const BACK_TO_DASHBOARD = `(() => {
  const home = ${JSON.stringify(DASHBOARD_HOME)};
  const place = () => {
    const bar = document.querySelector('#swagger-ui .topbar-wrapper');
    const logo = bar && bar.querySelector('a.link');
    if (!logo) return false;
    logo.href = home;
    logo.setAttribute('aria-label', 'Postwire dashboard');
    if (!bar.querySelector('.postwire-dashboard')) {
      const back = document.createElement('a');
      back.className = 'postwire-dashboard';
      back.href = home;
      back.textContent = '← Dashboard';
      logo.after(back);
    }
    return true;
  };
  if (place()) return;
  const observer = new MutationObserver(() => place() && observer.disconnect());
  observer.observe(document.body, { childList: true, subtree: true });
})();
`;

/**
 * `/docs` as Postwire's page rather than stock Swagger UI: the title, the logo and the favicon are the
 * dashboard's own files, so the two never drift apart; a link back to the dashboard; and its policy.
 */
export function docsBranding(): Pick<FastifySwaggerUiOptions, 'theme' | 'logo' | 'staticCSP'> {
  const logo = readFileSync(path.join(DASHBOARD_DIR, 'assets/logo.svg'));
  const favicon = readFileSync(path.join(DASHBOARD_DIR, 'assets/favicon.svg'));
  return {
    theme: {
      title: 'Postwire API reference',
      favicon: [
        { filename: 'favicon.svg', rel: 'icon', type: 'image/svg+xml', sizes: 'any', content: favicon },
      ],
      css: [
        {
          filename: 'postwire.css',
          // The logo is light on Swagger's dark top bar; Postwire's bar is white with an indigo rule.
          content:
            '.swagger-ui .topbar{background:#fff;border-bottom:3px solid #4f46e5}.swagger-ui .topbar .download-url-wrapper{display:none}' +
            '.swagger-ui .topbar .postwire-dashboard{flex:none;order:1;margin-left:auto;color:#3730a3;font:600 15px system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;text-decoration:none}' +
            '.swagger-ui .topbar .postwire-dashboard:hover{text-decoration:underline}',
        },
      ],
      js: [{ filename: 'postwire.js', content: BACK_TO_DASHBOARD }],
    },
    logo: { type: 'image/svg+xml', content: logo },
    staticCSP: DOCS_CSP,
  };
}
