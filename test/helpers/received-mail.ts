import assert from 'node:assert/strict';
import libmime from 'libmime';
import { authenticate } from 'mailauth';
import { simpleParser } from 'mailparser';
import type { CorpusMessage } from './mail-corpus.ts';
import { sha256 } from './mail-corpus.ts';

/** The header section of a message (up to its first empty line). */
export const headerOf = (message: Buffer): string => {
  const text = message.toString('latin1');
  const end = text.indexOf('\r\n\r\n');
  return end === -1 ? text : text.slice(0, end);
};

/** Every line ends CRLF (no CR or LF alone) and none is longer than 998 octets (RFC 5322 2.1.1). */
export function assertWireLines(message: Buffer, label: string): void {
  const text = message.toString('latin1');
  const bare = /\r(?!\n)|(?<!\r)\n/.exec(text);
  assert.equal(bare, null, `${label}: a bare ${bare?.[0] === '\r' ? 'CR' : 'LF'} at octet ${bare?.index}`);
  const lines = text.split('\r\n');
  const longest = lines.reduce((most, line) => Math.max(most, line.length), 0);
  assert.ok(longest <= 998, `${label}: a line of ${longest} octets`);
}

export type TxtResolver = (name: string, type: string) => Promise<unknown>;

/** mailauth's verdict on a received message: DKIM per signature, and DMARC. */
export async function mailauthVerdict(
  message: Buffer,
  options: { resolver: TxtResolver; sender: string },
): Promise<{ dkim: Array<{ domain: string; result: string; comment: string }>; dmarc: string }> {
  const result = await authenticate(message, {
    ip: '127.0.0.1',
    helo: 'postwire.test',
    sender: options.sender,
    mta: 'mx.receiver.test',
    resolver: options.resolver as never,
  });
  return {
    dkim: result.dkim.results.map((entry: any) => ({
      domain: entry.signingDomain,
      result: entry.status.result,
      comment: entry.status.comment ?? '',
    })),
    dmarc: (result.dmarc as any)?.status?.result ?? 'none',
  };
}

const lf = (text: string) => text.replace(/\r\n|\r/g, '\n');

/**
 * A text as read back: line breaks as LF. A message's body ends with a line break, so a single-part text
 * that did not end with one reads back with one more at its end; only that one is dropped.
 */
const readBack = (text: string, sent: string) => {
  const read = lf(text);
  return !sent.endsWith('\n') && read === `${sent}\n` ? sent : read;
};

/** What mailparser reads from the received message is what the corpus message sent. */
export async function assertContent(message: Buffer, sent: CorpusMessage, label: string): Promise<void> {
  // skipImageLinks: the html as sent, its cid: references not replaced by data: URLs.
  const parsed = await simpleParser(message, { skipImageLinks: true });
  const { expect } = sent;
  assert.equal(parsed.subject, expect.subject, `${label}: subject`);
  if (expect.text instanceof RegExp) assert.match(lf(parsed.text ?? ''), expect.text, `${label}: text`);
  else if (expect.text !== undefined) {
    assert.equal(readBack(parsed.text ?? '', expect.text), expect.text, `${label}: text`);
  }
  if (expect.html instanceof RegExp) assert.match(lf(String(parsed.html)), expect.html, `${label}: html`);
  else if (expect.html !== undefined) {
    assert.equal(readBack(String(parsed.html), lf(expect.html)), lf(expect.html), `${label}: html`);
  }
  const attachments = parsed.attachments.map((attachment) => ({
    filename: attachment.filename,
    contentType: attachment.contentType,
    sha256: sha256(attachment.content),
    ...(attachment.cid ? { contentId: attachment.cid } : {}),
  }));
  // Inline parts sit in the html's multipart/related, before the others: order is not compared.
  const byName = (a: { filename?: string | undefined }, b: { filename?: string | undefined }) =>
    String(a.filename).localeCompare(String(b.filename));
  assert.deepEqual(
    attachments.sort(byName),
    [...(expect.attachments ?? [])].sort(byName),
    `${label}: attachments`,
  );
  for (const [name, value] of Object.entries(expect.headers ?? {})) {
    // Read from the header lines as they arrived (mailparser folds List-* into one object), unfolded and
    // with their MIME words decoded.
    const line = parsed.headerLines.find((header) => header.key === name)?.line;
    const read =
      line === undefined
        ? undefined
        : libmime.decodeWords(
            line
              .slice(line.indexOf(':') + 1)
              .replace(/\r?\n[ \t]/g, ' ')
              .trim(),
          );
    assert.equal(read, value, `${label}: header ${name}`);
  }
  const addresses = (field: unknown) =>
    [field]
      .flat()
      .flatMap((entry: any) => entry?.value ?? [])
      .map((mailbox: any) => mailbox.address);
  if (expect.cc) assert.deepEqual(addresses(parsed.cc), expect.cc, `${label}: cc`);
  if (expect.replyTo) assert.deepEqual(addresses(parsed.replyTo), expect.replyTo, `${label}: reply-to`);
  assert.doesNotMatch(headerOf(message), /^bcc:/im, `${label}: no Bcc header`);
}
