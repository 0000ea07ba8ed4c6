// The OpenAPI document as the server serves it at /v1/openapi.json, without a server: `postwire openapi`
// prints it, and the SDK is generated from it.
import { buildApp } from './app.ts';
import { defaultConfig } from './config.ts';
import { openDatabase } from './db/connection.ts';
import { systemClock } from './lib/clock.ts';
import { createSecretBox } from './lib/crypto.ts';
import { createServices } from './services.ts';

export async function renderOpenApiDocument(): Promise<Record<string, unknown>> {
  // Building the app registers every route; nothing is read or written, so an empty in-memory database and
  // a throwaway key are enough.
  const database = await openDatabase({ sqlitePath: ':memory:' });
  const services = createServices(database, defaultConfig(), {
    clock: systemClock,
    secretBox: createSecretBox(Buffer.alloc(32)),
    resolver: async () => [],
  });
  const app = await buildApp(services);
  try {
    await app.ready();
    return app.swagger() as unknown as Record<string, unknown>;
  } finally {
    await app.close();
    await services.close();
    await database.close();
  }
}
