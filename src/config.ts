// Every setting, once: its environment name, default, reading rule and meaning (CONFIG_SCHEMA), put together
// here from its sections in src/config/, in the order the reference lists them. The configuration the code
// receives (Config), the reference (docs/configuration.md, `npm run config:generate`) and the CLI's usage are
// all produced from it.
import { type Env, readSchema, type ValuesOf } from './lib/settings.ts';
import { ENGAGEMENT_SETTINGS } from './config/engagement.ts';
import { HTTP_SETTINGS } from './config/http.ts';
import { INBOUND_SETTINGS } from './config/inbound.ts';
import { HEALTH_SETTINGS, LOGGING_SETTINGS, WORKER_SETTINGS } from './config/operations.ts';
import { SENDING_DOMAIN_SETTINGS } from './config/sending-domains.ts';
import { REPUTATION_SETTINGS } from './config/reputation.ts';
import { SENDING_SETTINGS } from './config/sending.ts';
import { STORAGE_SETTINGS } from './config/storage.ts';
import { SUBMISSION_SETTINGS } from './config/submission.ts';
import { WEBHOOK_SETTINGS } from './config/webhooks.ts';

export { type TrustProxy } from './config/http.ts';
export { INBOUND_MAX_CONNECTIONS } from './config/inbound.ts';
export {
  LOG_FORMATS,
  LOG_LEVELS,
  type LogFormat,
  type LogLevel,
  WORKER_POLL_INTERVAL_MS,
} from './config/operations.ts';
export { type SenderDomainsPolicy } from './config/sending-domains.ts';
export { type DkimConfig, type DsnNotify, type MailTransportKind } from './config/sending.ts';
export { SUBMISSION_MAX_CONNECTIONS } from './config/submission.ts';

export const CONFIG_SCHEMA = {
  ...HTTP_SETTINGS,
  ...STORAGE_SETTINGS,
  ...LOGGING_SETTINGS,
  ...HEALTH_SETTINGS,
  ...WORKER_SETTINGS,
  ...WEBHOOK_SETTINGS,
  ...SENDING_SETTINGS,
  ...SENDING_DOMAIN_SETTINGS,
  ...REPUTATION_SETTINGS,
  ...INBOUND_SETTINGS,
  ...SUBMISSION_SETTINGS,
  ...ENGAGEMENT_SETTINGS,
};

export type Config = ValuesOf<typeof CONFIG_SCHEMA>;
export type HttpTimeouts = Config['httpTimeouts'];
export type InboundConfig = Config['inbound'];
export type SpamdConfig = Config['spamd'];
export type EngagementDefaults = Config['engagement'];

/** Rules between settings, checked once each has been read. */
const RULES: Array<(config: Config) => string | undefined> = [
  ...(
    [
      ['TRACK_OPENS', 'trackOpens'],
      ['TRACK_CLICKS', 'trackClicks'],
      ['LIST_UNSUBSCRIBE', 'listUnsubscribe'],
    ] as const
  ).map(
    ([name, key]) =>
      (config: Config) =>
        config.engagement[key] && config.publicUrl === undefined
          ? `${name}=true needs PUBLIC_URL (the base URL recipients' mail clients reach).`
          : undefined,
  ),
  (config) =>
    config.mailTransport === 'relay' && !config.smtpUrl
      ? 'MAIL_TRANSPORT=relay needs SMTP_URL (smtp://user:pass@host:port).'
      : undefined,
  (config) =>
    config.submission.tlsPort !== undefined && !config.submission.tls
      ? 'SUBMISSION_TLS_PORT needs SUBMISSION_TLS_CERT and SUBMISSION_TLS_KEY.'
      : undefined,
  // Without a certificate no client could AUTH: the port would take connections and refuse every login.
  (config) =>
    config.submission.port !== undefined && !config.submission.tls && !config.submission.allowPlainLoopback
      ? 'SUBMISSION_PORT needs SUBMISSION_TLS_CERT and SUBMISSION_TLS_KEY (AUTH only after STARTTLS), or, ' +
        'to try it on this machine, SUBMISSION_ALLOW_PLAIN_LOOPBACK=true (AUTH without TLS from loopback only).'
      : undefined,
];

export class ConfigError extends Error {
  constructor(problems: string[]) {
    super(`Invalid configuration:\n${problems.map((problem) => `  - ${problem}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/**
 * The configuration the environment gives, or a ConfigError naming every bad setting. `stdoutIsTTY` picks the
 * default log format.
 */
export function loadConfig(
  env: Env = process.env,
  { stdoutIsTTY = process.stdout.isTTY === true }: { stdoutIsTTY?: boolean } = {},
): Config {
  const problems: string[] = [];
  const config = readSchema(CONFIG_SCHEMA, { env, problems, stdoutIsTTY });
  for (const rule of RULES) {
    const problem = rule(config);
    if (problem) problems.push(problem);
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}

/** Every setting at its default (and logs as JSON): what tests and benchmarks start from. */
export function defaultConfig(): Config {
  return loadConfig({}, { stdoutIsTTY: false });
}

/** The defaults, for code built without a Config (tests, benchmarks): read from the schema like the rest. */
export const DEFAULTS: Readonly<Config> = defaultConfig();
