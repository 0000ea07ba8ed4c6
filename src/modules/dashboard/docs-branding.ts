import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { FastifySwaggerUiOptions } from '@fastify/swagger-ui';
import { DASHBOARD_DIR } from './dashboard.routes.ts';

/**
 * `/docs` as Postwire's page rather than stock Swagger UI: the title, the logo (linking back to the
 * dashboard) and the favicon are the dashboard's own files, so the two never drift apart.
 */
export function docsBranding(): Pick<FastifySwaggerUiOptions, 'theme' | 'logo'> {
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
            '.swagger-ui .topbar{background:#fff;border-bottom:3px solid #4f46e5}.swagger-ui .topbar .download-url-wrapper{display:none}',
        },
      ],
    },
    logo: { type: 'image/svg+xml', content: logo, href: '/', target: '_self' },
  };
}
