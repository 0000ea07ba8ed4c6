// The SMTP submission server applications send through: ports, TLS, size and session limits.
import { boolean, custom, duration, integer, section, text } from '../lib/settings.ts';
import { optionalPort, tlsPair } from './readers.ts';

/** Connections the SMTP submission server holds at once (each port), from all clients together: applications, a handful each. */
export const SUBMISSION_MAX_CONNECTIONS = 500;

export const SUBMISSION_SETTINGS = section('SMTP submission', {
  submission: {
    host: text('SUBMISSION_HOST', {
      default: '127.0.0.1',
      description: 'where the SMTP submission server listens (with a submission port set)',
      details: 'in `postwire serve`, or alone with `postwire submission`',
    }),
    port: optionalPort('SUBMISSION_PORT', {
      description: 'its port for STARTTLS submission (587 in production); unset: no such port',
      details:
        'AUTH only after STARTTLS, except from a loopback address with `SUBMISSION_ALLOW_PLAIN_LOOPBACK`',
    }),
    tlsPort: optionalPort('SUBMISSION_TLS_PORT', {
      description: 'its port for implicit TLS submission (465 in production); unset: no such port',
    }),
    tls: custom(['SUBMISSION_TLS_CERT', 'SUBMISSION_TLS_KEY'], {
      default: 'unset',
      description: 'PEM text or file paths: the certificate both submission ports present',
      details:
        'needed for `SUBMISSION_TLS_PORT`, and for AUTH on `SUBMISSION_PORT` from anywhere but loopback',
      read: (context) => tlsPair(context, 'SUBMISSION_TLS_CERT', 'SUBMISSION_TLS_KEY', 'SMTP submission'),
    }),
    allowPlainLoopback: boolean('SUBMISSION_ALLOW_PLAIN_LOOPBACK', {
      default: false,
      description: 'AUTH without TLS from a loopback address (development); never from elsewhere',
    }),
    maxBytes: integer('SUBMISSION_MAX_BYTES', {
      default: 40 * 1024 * 1024,
      shownDefault: '`41943040` (40 MiB)',
      min: 1024,
      max: 1024 * 1024 * 1024,
      description: 'a larger message is refused: announced in EHLO SIZE, and answered 552 at DATA',
    }),
    sessionTimeoutMs: duration('SUBMISSION_SESSION_TIMEOUT', {
      default: '5m',
      min: '1s',
      max: '1h',
      description:
        'a submission session still open this long is ended with a 421, however busy the client keeps it',
      details:
        'as `INBOUND_SESSION_TIMEOUT`: the 60 s idle timeout alone lets a byte every few seconds hold a ' +
        'connection for ever. A message cut off is not stored; the client keeps it and sends it again. In 5 ' +
        'minutes a 40 MiB message (`SUBMISSION_MAX_BYTES`) needs about 140 KB/s',
    }),
    maxConnectionsPerClient: integer('SUBMISSION_MAX_CONNECTIONS_PER_CLIENT', {
      default: 20,
      min: 1,
      max: SUBMISSION_MAX_CONNECTIONS,
      description:
        'SMTP submission sessions one client address may hold at once (both ports together); the next is refused with a 421',
      details: `counted from the connection, before AUTH; all clients together hold ${SUBMISSION_MAX_CONNECTIONS} at most on each port`,
    }),
  },
});
