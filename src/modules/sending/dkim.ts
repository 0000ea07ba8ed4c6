import { createHash, createPrivateKey, type KeyObject, sign } from 'node:crypto';
import type { DkimConfig } from '../../config.ts';

// DKIM signing (RFC 6376, relaxed/relaxed), done here rather than by nodemailer: nodemailer signs each
// header name at most once, so it cannot over-sign, and it leaves List-Unsubscribe-Post and Feedback-ID
// out. Here `h=` names every instance present of the headers below, and the over-signed ones once more:
// an instance that does not exist signs as empty, so adding one (a second From, a List-Unsubscribe the
// sender did not set) after signing breaks the signature, as does removing one.

/** Signed when present, every instance. */
const SIGNED = [
  'from',
  'sender',
  'reply-to',
  'subject',
  'date',
  'message-id',
  'to',
  'cc',
  'mime-version',
  'content-type',
  'content-transfer-encoding',
  'in-reply-to',
  'references',
  'list-id',
  'list-unsubscribe',
  'list-unsubscribe-post',
  'feedback-id',
];

/** Signed once more than present: none can be added after signing (nor removed). */
const OVERSIGNED = ['from', 'to', 'subject', 'list-unsubscribe', 'list-unsubscribe-post'];

interface HeaderField {
  name: string;
  /** The whole field as in the message, folding included, without the final CRLF. */
  raw: string;
}

function splitMessage(message: Buffer): { header: string; body: Buffer } {
  const end = message.indexOf('\r\n\r\n');
  if (end === -1) return { header: message.toString('latin1').replace(/\r\n$/, ''), body: Buffer.alloc(0) };
  return { header: message.subarray(0, end).toString('latin1'), body: message.subarray(end + 4) };
}

function parseFields(header: string): HeaderField[] {
  const fields: HeaderField[] = [];
  for (const line of header.split('\r\n')) {
    if (/^[ \t]/.test(line) && fields.length > 0) fields[fields.length - 1]!.raw += `\r\n${line}`;
    else if (line !== '')
      fields.push({ name: line.slice(0, line.indexOf(':')).trim().toLowerCase(), raw: line });
  }
  return fields;
}

/** Relaxed header canonicalization (RFC 6376 3.4.2), without the final CRLF. */
function relaxedHeader(raw: string): string {
  const colon = raw.indexOf(':');
  const name = raw.slice(0, colon).trim().toLowerCase();
  const value = raw
    .slice(colon + 1)
    .replace(/\r\n/g, '')
    .replace(/[ \t]+/g, ' ')
    .trim();
  return `${name}:${value}`;
}

/** Relaxed body canonicalization (RFC 6376 3.4.4). */
function relaxedBody(body: Buffer): Buffer {
  const lines = body
    .toString('latin1')
    .split('\r\n')
    .map((line) => line.replace(/[ \t]+/g, ' ').replace(/ $/, ''));
  while (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  return Buffer.from(lines.length === 0 ? '' : `${lines.join('\r\n')}\r\n`, 'latin1');
}

export interface DkimSigner {
  sign(message: Buffer): Buffer;
}

export function createDkimSigner(config: DkimConfig): DkimSigner {
  const key: KeyObject = createPrivateKey(config.privateKey);
  const ed25519 = key.asymmetricKeyType === 'ed25519';
  const algorithm = ed25519 ? 'ed25519-sha256' : 'rsa-sha256';
  return {
    sign(message) {
      const { header, body } = splitMessage(message);
      const fields = parseFields(header);
      const bodyHash = createHash('sha256').update(relaxedBody(body)).digest('base64');

      const names: string[] = [];
      const signedLines: string[] = [];
      for (const name of SIGNED) {
        // Instances are signed from the bottom up (RFC 6376 5.4.2).
        const present = fields.filter((field) => field.name === name).reverse();
        for (const field of present) {
          names.push(name);
          signedLines.push(relaxedHeader(field.raw));
        }
        if (OVERSIGNED.includes(name)) names.push(name); // an instance that does not exist: signs as nothing
      }

      const tags = [
        `v=1; a=${algorithm}; c=relaxed/relaxed; d=${config.domain}; s=${config.selector};`,
        `\tt=${Math.floor(Date.now() / 1000)}; bh=${bodyHash};`,
        `\th=${names.join(':')};`,
        '\tb=',
      ];
      const unsigned = `DKIM-Signature: ${tags.join('\r\n')}`;
      const data = Buffer.from(
        [...signedLines, relaxedHeader(unsigned)]
          .map((line, index, all) => (index < all.length - 1 ? `${line}\r\n` : line))
          .join(''),
        'latin1',
      );
      const signature = ed25519
        ? sign(null, createHash('sha256').update(data).digest(), key)
        : sign('sha256', data, key);
      const folded = signature.toString('base64').replace(/(.{72})(?=.)/g, '$1\r\n\t');
      return Buffer.concat([Buffer.from(`${unsigned}${folded}\r\n`, 'latin1'), message]);
    },
  };
}
