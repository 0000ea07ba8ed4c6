import type { DkimConfig } from '../../../config.ts';
import { DEFAULTS } from '../../../config.ts';
import { createMessageBuilder } from '../build-pool.ts';
import { mailOptions } from '../mime.ts';
import type { MailTransport, RecipientOutcome } from './transport.ts';

// Test addresses (RFC 2606 reserves .test): `bounced@`, `delayed@` and `complained@example.test`, also with a
// `+tag` (`bounced+signup@example.test`), so integrators can drive every webhook handler without a mail server.
const TEST_ADDRESS = /^(bounced|delayed|complained)(\+[^@]*)?@example\.test$/i;

/**
 * Keeps each message in the database (readable at GET /v1/emails/{id}/raw) instead of letting it leave the
 * machine; the default when no SMTP relay or direct delivery is configured. Events flow as if it had been
 * delivered: `email.sent` and `email.delivered`; the test addresses bounce (550), are delayed once (451,
 * then delivered on the retry) or are delivered and then complained about.
 */
export function createCaptureTransport(
  options: { dkim?: DkimConfig | undefined; timeoutMs?: number } = {},
): MailTransport {
  const builder = createMessageBuilder({
    fallback: options.dkim,
    timeoutMs: options.timeoutMs ?? DEFAULTS.sendTimeoutMs,
  });
  return {
    kind: 'capture',
    description:
      'nowhere: capture mode keeps each message in the database (GET /v1/emails/{id}/raw); set SMTP_URL or MAIL_TRANSPORT=direct to send for real',
    finalHop: true,
    perDomain: false,
    async send(job) {
      const addresses = job.recipients.map((recipient) => recipient.address);
      const raw = await builder.build(mailOptions(job.email, addresses, job.envelopeFrom), job.dkim);
      const outcomes = job.recipients.map(({ address, attempts }): RecipientOutcome => {
        const test = TEST_ADDRESS.exec(address)?.[1]?.toLowerCase();
        if (test === 'bounced') {
          return {
            address,
            result: 'bounced',
            response: `550 5.1.1 <${address}>: Recipient address rejected: User unknown (capture test address)`,
            error: null,
          };
        }
        if (test === 'delayed' && attempts === 0) {
          return {
            address,
            result: 'deferred',
            response: `451 4.3.0 <${address}>: Temporary failure, try again later (capture test address)`,
            error: null,
          };
        }
        return {
          address,
          result: 'accepted',
          response: `250 2.0.0 Captured as ${job.email.id}`,
          ...(test === 'complained' ? { complained: true } : {}),
        };
      });
      return { outcomes, raw };
    },
    close: () => builder.close(),
  };
}
