import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { sendError } from '../../http/error-handler.ts';

/** The dashboard's own files (HTML, CSS, ES modules): `<repo>/dashboard/`. */
export const DASHBOARD_DIR = fileURLToPath(new URL('../../../dashboard/', import.meta.url));

/**
 * The page's policy: scripts and styles only from files this server serves (no inline script, no eval), API
 * calls only to this origin, and frames only from this origin (the email preview frame, below). Nothing may
 * frame the dashboard itself.
 */
export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "frame-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

/**
 * The email preview frame runs with `sandbox="allow-scripts"` (an opaque origin: no cookies, no storage, no
 * access to the dashboard) and this policy: its one script is the loader that writes the email in, the
 * email's own scripts never run (no inline script), its inline styles do (emails are styled inline), and it
 * loads nothing from the network — no tracking pixel fires because someone looked at a preview.
 */
export const PREVIEW_FRAME_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'unsafe-inline'",
  'img-src data:',
  'font-src data:',
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'self'",
].join('; ');

interface Asset {
  body: Buffer;
  type: string;
  etag: string;
  csp: string;
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

/**
 * Preact and htm straight from node_modules, so `npm ci` is the whole build and their versions are the ones
 * package-lock.json pins. The browser cannot resolve bare specifiers without an import map (which would be an
 * inline script), so the one bare import among them is pointed at the served URL here, once, at start.
 */
function vendorFiles(): Array<{ url: string; file: string; rewrite?: (source: string) => string }> {
  // The packages' own ESM entry points, as Node's resolver (their `exports`, `import` condition) finds them.
  const esm = (specifier: string) => fileURLToPath(import.meta.resolve(specifier));
  return [
    { url: '/dashboard/vendor/preact.js', file: esm('preact') },
    {
      url: '/dashboard/vendor/hooks.js',
      file: esm('preact/hooks'),
      rewrite: (source) => {
        const rewritten = source.replace(/from\s*"preact"/g, 'from"/dashboard/vendor/preact.js"');
        // A new preact release that imports differently must fail here, not as a blank page in a browser.
        if (rewritten === source || /from\s*"(?!\/)/.test(rewritten)) {
          throw new Error('preact/hooks: unexpected imports; update the dashboard vendor rewrite');
        }
        return rewritten;
      },
    },
    { url: '/dashboard/vendor/htm.js', file: esm('htm') },
  ];
}

function walk(dir: string, prefix: string, out: Array<{ url: string; file: string }>): void {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) walk(file, `${prefix}${entry.name}/`, out);
    else if (TYPES[path.extname(entry.name)]) out.push({ url: `${prefix}${entry.name}`, file });
  }
}

/** Every file the dashboard serves, read once: a URL outside this table cannot reach the disk. */
export function loadDashboardAssets(dir: string = DASHBOARD_DIR): Map<string, Asset> {
  const files: Array<{ url: string; file: string; rewrite?: (source: string) => string }> = [];
  walk(dir, '/dashboard/', files);
  files.push(...vendorFiles());
  const assets = new Map<string, Asset>();
  for (const { url, file, rewrite } of files) {
    let body = readFileSync(file);
    if (rewrite) body = Buffer.from(rewrite(body.toString('utf8')));
    assets.set(url, {
      body,
      type: TYPES[path.extname(url)]!,
      etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`,
      csp: url === '/dashboard/frame.html' ? PREVIEW_FRAME_CSP : DASHBOARD_CSP,
    });
  }
  return assets;
}

/**
 * The dashboard: static files at `/dashboard/…`, and its page (index.html) at `/` and at every other
 * `/dashboard/…` path, so a reloaded or shared page URL opens the same page. The files are public, like
 * `/docs`: they hold no data, and the API key the page asks for goes only into requests to `/v1`.
 */
export function registerDashboardRoutes(app: FastifyInstance, options: { dir?: string } = {}): void {
  const assets = loadDashboardAssets(options.dir);
  const index = assets.get('/dashboard/index.html');
  if (!index) throw new Error('dashboard/index.html is missing');

  const send = (reply: FastifyReply, asset: Asset, ifNoneMatch: string | undefined) => {
    reply
      .header('content-security-policy', asset.csp)
      .header('x-content-type-options', 'nosniff')
      .header('referrer-policy', 'no-referrer')
      // Not versioned by URL, so revalidate each time; the ETag makes that a 304 when nothing changed.
      .header('cache-control', 'no-cache')
      .header('etag', asset.etag);
    if (ifNoneMatch === asset.etag) return reply.code(304).send();
    return reply.type(asset.type).send(asset.body);
  };

  const config = { public: true, staticFile: true };
  const schema = { hide: true };
  const page = (request: FastifyRequest, reply: FastifyReply) =>
    send(reply, index, request.headers['if-none-match']);
  app.get('/', { config, schema }, page);
  app.get('/dashboard', { config, schema }, page);
  app.get('/dashboard/*', { config, schema }, (request, reply) => {
    const url = request.url.split('?')[0]!;
    const asset = assets.get(url);
    if (asset) return send(reply, asset, request.headers['if-none-match']);
    // A path with an extension is a file that does not exist; anything else is a page of the app.
    if (
      path.extname(url) !== '' ||
      url.startsWith('/dashboard/assets/') ||
      url.startsWith('/dashboard/vendor/')
    ) {
      return sendError(request, reply, 404, 'route_not_found', `No file ${url}.`);
    }
    return page(request, reply);
  });
}
