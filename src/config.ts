import path from 'node:path';
import { parseDuration } from './lib/duration.ts';

export interface Config {
  port: number;
  host: string;
  /** `postgres://…` selects PostgreSQL; unset means the embedded SQLite file `postwire.db` in dataDir. */
  databaseUrl: string | undefined;
  dataDir: string;
  /** 32 bytes for AES-256-GCM; undefined means "generate once into dataDir". */
  encryptionKey: Buffer | undefined;
  allowPrivateUrls: boolean;
  bootstrapKey: string | undefined;
  /** Requests a key may make per window; 0 turns the limiter off. */
  rateLimit: number;
  rateLimitWindowMs: number;
  logLevel: string;
}

export class ConfigError extends Error {
  constructor(problems: string[]) {
    super(`Invalid configuration:\n${problems.map((problem) => `  - ${problem}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

export function loadConfig(env: Env = process.env): Config {
  const problems: string[] = [];

  const integer = (name: string, fallback: number, min: number, max: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw);
    if (!Number.isInteger(value) || value < min || value > max) {
      problems.push(`${name} must be an integer from ${min} to ${max}, got '${raw}'.`);
      return fallback;
    }
    return value;
  };

  const boolean = (name: string, fallback: boolean): boolean => {
    const raw = env[name]?.toLowerCase();
    if (raw === undefined || raw === '') return fallback;
    if (['true', '1', 'yes'].includes(raw)) return true;
    if (['false', '0', 'no'].includes(raw)) return false;
    problems.push(`${name} must be true or false, got '${env[name]}'.`);
    return fallback;
  };

  const duration = (name: string, fallback: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = parseDuration(raw);
    if (value === undefined) {
      problems.push(`${name} must be a duration such as 500ms, 5s, 5m or 2h, got '${raw}'.`);
      return fallback;
    }
    return value;
  };

  const databaseUrl = env.DATABASE_URL || undefined;
  if (databaseUrl && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    problems.push(`DATABASE_URL must start with postgres:// (leave it unset for the embedded SQLite).`);
  }

  let encryptionKey: Buffer | undefined;
  if (env.POSTWIRE_ENCRYPTION_KEY) {
    encryptionKey = decodeKey(env.POSTWIRE_ENCRYPTION_KEY);
    if (!encryptionKey)
      problems.push('POSTWIRE_ENCRYPTION_KEY must be 32 bytes, as 64 hex digits or base64.');
  }

  const config: Config = {
    port: integer('PORT', 3000, 0, 65535),
    host: env.HOST || '127.0.0.1',
    databaseUrl,
    dataDir: path.resolve(env.POSTWIRE_DATA_DIR || './data'),
    encryptionKey,
    allowPrivateUrls: boolean('POSTWIRE_ALLOW_PRIVATE_URLS', false),
    bootstrapKey: env.POSTWIRE_BOOTSTRAP_KEY || undefined,
    rateLimit: integer('POSTWIRE_RATE_LIMIT', 6000, 0, 1_000_000_000),
    rateLimitWindowMs: duration('POSTWIRE_RATE_LIMIT_WINDOW', 60_000),
    logLevel: env.LOG_LEVEL || 'info',
  };
  if (config.bootstrapKey !== undefined && config.bootstrapKey.length < 16) {
    problems.push('POSTWIRE_BOOTSTRAP_KEY must be at least 16 characters.');
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}

function decodeKey(text: string): Buffer | undefined {
  const bytes = /^[0-9a-fA-F]{64}$/.test(text) ? Buffer.from(text, 'hex') : Buffer.from(text, 'base64');
  return bytes.length === 32 ? bytes : undefined;
}
