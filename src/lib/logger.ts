import type { LoggerOptions } from 'pino';

/**
 * Options for the process's pino logger (the server's Fastify logger and the worker's). Pretty output runs
 * pino-pretty as a pino transport (a worker thread), so formatting never blocks the event loop. The settings
 * as config.ts checked them (LOG_FORMATS): `pretty`, else JSON.
 */
export function loggerOptions(config: { logLevel: string; logFormat: string }): LoggerOptions {
  return {
    level: config.logLevel,
    // API keys travel in the authorization header; webhook secrets only in bodies, which are never logged.
    redact: ['req.headers.authorization'],
    ...(config.logFormat === 'pretty'
      ? {
          transport: {
            target: 'pino-pretty',
            options: { translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname', singleLine: false },
          },
        }
      : {}),
  };
}
