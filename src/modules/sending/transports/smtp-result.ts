import type { RecipientOutcome } from './transport.ts';

// SMTP replies mapped to outcomes, per recipient: 2xx accepted, 5xx a bounce (permanent), 4xx or no reply
// at all (refused, timed out, cut off) deferred for a retry.

/** What nodemailer's SMTP errors carry (see nodemailer's smtp-connection `_formatError`). */
export interface SmtpError extends Error {
  code?: string;
  responseCode?: number;
  response?: string;
  command?: string;
  recipient?: string;
  rejectedErrors?: SmtpError[];
}

export interface SmtpInfo {
  accepted?: unknown[];
  rejected?: unknown[];
  rejectedErrors?: SmtpError[];
  response?: string;
}

const same = (a: unknown, b: string) => typeof a === 'string' && a.toLowerCase() === b.toLowerCase();

function fromReply(
  address: string,
  code: number | undefined,
  response: string | undefined,
  error: string | null,
): RecipientOutcome {
  const reply = response ?? null;
  if (code !== undefined && code >= 500) return { address, result: 'bounced', response: reply, error };
  return { address, result: 'deferred', response: reply, error };
}

/** The server took the message: accepted recipients, and those it refused at RCPT TO. */
export function outcomesFromInfo(info: SmtpInfo, recipients: readonly string[]): RecipientOutcome[] {
  return recipients.map((address) => {
    const refused = info.rejectedErrors?.find((error) => same(error.recipient, address));
    if (refused) return fromReply(address, refused.responseCode, refused.response, null);
    if (info.rejected?.some((entry) => same(entry, address))) {
      return { address, result: 'deferred', response: null, error: 'the server refused the recipient' };
    }
    return { address, result: 'accepted', response: info.response ?? null };
  });
}

/** True when no SMTP conversation decided anything: the next MX may be tried. */
export function isConnectionFailure(error: SmtpError): boolean {
  return error.responseCode === undefined && error.code !== 'EENVELOPE' && error.code !== 'EMESSAGE';
}

/** One line about a failure without a reply, for people (and the event's `error`). */
export function describeSmtpError(error: SmtpError): string {
  const cause =
    error.code === 'ECONNECTION' || error.code === 'ESOCKET'
      ? (error as { originalCode?: string }).originalCode
      : undefined;
  if (error.name === 'AbortError' || error.code === 'EABORT') return 'the attempt was aborted';
  if (cause === 'ECONNREFUSED' || /ECONNREFUSED/.test(error.message))
    return 'connection refused (ECONNREFUSED)';
  if (error.code === 'ETIMEDOUT') return `timed out (${error.message})`;
  return error.code ? `${error.message} (${error.code})` : error.message;
}

/** The message was refused as a whole (or never got to a server): the same outcome for every recipient. */
export function outcomesFromError(error: SmtpError, recipients: readonly string[]): RecipientOutcome[] {
  // A refused login is a configuration problem of this service, not of the message: retry, never bounce.
  if (error.code === 'EAUTH' || error.code === 'ENOAUTH') {
    return recipients.map((address) => ({
      address,
      result: 'deferred',
      response: error.response ?? null,
      error: `the relay refused the login: ${error.message}`,
    }));
  }
  return recipients.map((address) => {
    const refused = error.rejectedErrors?.find((entry) => same(entry.recipient, address));
    if (refused) return fromReply(address, refused.responseCode, refused.response, null);
    if (error.responseCode !== undefined) return fromReply(address, error.responseCode, error.response, null);
    return { address, result: 'deferred', response: null, error: describeSmtpError(error) };
  });
}
