import { Readable } from 'node:stream';
import type { SendMailOptions } from 'nodemailer';
import { encode as base64Encode } from 'nodemailer/lib/base64';
import type MailMessage from 'nodemailer/lib/mailer/mail-message';
import MimeNode from 'nodemailer/lib/mime-node';
import { encode as qpEncode, wrap as qpWrap } from 'nodemailer/lib/qp';
import type { SMTPPoolSentMessageInfo } from 'nodemailer/lib/smtp-pool';
import { STORED_ADDRESS } from '../../lib/addresses.ts';

// The sending path's replacements of library code, each kept because it was measured to matter, and each held
// byte for byte equal to the library it replaces by a differential test over a realistic corpus and random
// input. Nothing here patches a library or reads a field its types do not declare.
//
// - writeAtOnce() replaces nodemailer's MimeNode#build() for the trees mailOptions() makes: build() streams
//   (a pipeline per node, encoder streams, a tick between every part), which was most of the CPU a short
//   message cost. Held equal by test/mime.test.ts ("written at once", the fidelity corpus and 300 random
//   messages against build()).
// - poolMessage() replaces what sendMail() hands nodemailer's SMTP pool for a built (`raw`) message: its
//   plugin steps and a second MIME tree compiled around the raw message were a tenth of a relayed send's CPU.
//   Held equal by test/mime.test.ts ("the relay's pool message"): the same envelope, DSN request and bytes
//   arrive at an SMTP server as through sendMail().
//
// The DKIM signer (dkim.ts) is not a fast path but a feature nodemailer's signer lacks (every instance and
// over-signing in h=); test/mime.test.ts holds its body hash equal to nodemailer's and has both verifiers
// (mailauth, dkimpy) check its signatures.

/** nodemailer's QP encoder works through a content in slices of this many bytes; one slice is written here. */
const ENCODER_SLICE = 64 * 1024;
const LINE_LENGTH = 76;

const contentBytes = (content: string | Buffer): Buffer =>
  typeof content === 'string' ? Buffer.from(content, 'utf8') : content;

/**
 * Whether every node of the tree can be written at once, the way build() would write it. The tree is one
 * mailOptions() compiled: no raw parts and no transforms (those come from `raw` options and mailer plugins,
 * which mailOptions() never gives), so what is left to check is each content's form and size.
 */
function writableAtOnce(node: MimeNode): boolean {
  if (node === node.rootNode && node.newline) return false;
  const { content } = node;
  if (content) {
    if (typeof content !== 'string' && !Buffer.isBuffer(content)) return false;
    if (contentBytes(content).length > ENCODER_SLICE) return false;
    // Outside text/*, QP keeps lone CR and LF as data (the encoder's binary mode), which is not written here.
    const type = String(node.getHeader('Content-Type') ?? '')
      .toLowerCase()
      .trim();
    if (node.getTransferEncoding() === 'quoted-printable' && !type.startsWith('text/')) return false;
  }
  return node.childNodes.every(writableAtOnce);
}

/** Base64 in lines of 76, CRLF between them, as nodemailer's base64 encoder writes one chunk. */
function base64Lines(bytes: Buffer): string {
  const encoded = base64Encode(bytes);
  const lines: string[] = [];
  for (let at = 0; at < encoded.length; at += LINE_LENGTH) lines.push(encoded.slice(at, at + LINE_LENGTH));
  return lines.join('\r\n');
}

/**
 * Quoted-printable as nodemailer's QP encoder writes one chunk of a slice or less: the trailing spaces and tabs
 * encoded after the rest, each part wrapped after the unfinished line the one before left.
 */
function quotedPrintable(bytes: Buffer): string {
  let end = bytes.length;
  while (end > 0 && (bytes[end - 1] === 0x20 || bytes[end - 1] === 0x09)) end -= 1;
  let written = '';
  let line = '';
  for (const part of [bytes.subarray(0, end), bytes.subarray(end)]) {
    if (part.length === 0) continue;
    const wrapped = qpWrap(line + qpEncode(part), LINE_LENGTH);
    const lastLineFeed = wrapped.lastIndexOf('\n');
    written += wrapped.slice(0, lastLineFeed + 1);
    line = wrapped.slice(lastLineFeed + 1);
  }
  return written + line;
}

function writeNode(node: MimeNode, parts: Buffer[]): void {
  parts.push(Buffer.from(`${node.buildHeaders()}\r\n\r\n`, 'utf8'));
  const content = node.content as string | Buffer | undefined;
  if (content) {
    const encoding = node.getTransferEncoding();
    const bytes = contentBytes(content);
    if (encoding === 'base64') parts.push(Buffer.from(base64Lines(bytes), 'latin1'));
    else if (encoding === 'quoted-printable') parts.push(Buffer.from(quotedPrintable(bytes), 'latin1'));
    else parts.push(bytes);
  }
  if (!node.multipart) return;
  node.childNodes.forEach((child, index) => {
    parts.push(Buffer.from(`${index > 0 ? '\r\n' : ''}--${node.boundary}\r\n`, 'utf8'));
    writeNode(child, parts);
  });
  parts.push(Buffer.from(`\r\n--${node.boundary}--\r\n`, 'utf8'));
}

/**
 * A tree compiled from mailOptions(), written at once, byte for byte as its build() writes it; undefined when
 * the tree holds what is not written here (a content over one encoder slice, QP outside text/*), which is then
 * left to build().
 */
export function writeAtOnce(root: MimeNode): Buffer | undefined {
  if (!writableAtOnce(root)) return undefined;
  const parts: Buffer[] = [];
  writeNode(root, parts);
  const message = Buffer.concat(parts);
  // As nodemailer's last stage: the message ends with a line break.
  const last = message.at(-1);
  if (last === 0x0a) return message;
  return Buffer.concat([message, Buffer.from(last === 0x0d ? '\n' : '\r\n', 'latin1')]);
}

/**
 * A built message as nodemailer's SMTP pool takes it through its transport interface (`send(mail, callback)`):
 * what sendMail() would hand it for a `raw` message, made without sendMail()'s layers. The pool reads the
 * signal, the DSN request, and the message's envelope, Message-ID and stream. With plain envelope addresses
 * not even a MIME node is made (its envelope parsing and stream pipeline were another twentieth of a send);
 * any other address goes through nodemailer's own envelope parsing (which lower-cases and punycodes domains).
 */
/** The bytes a message's stream gives the SMTP client at a time (its work per chunk stays short). */
const STREAM_SLICE_BYTES = 64 * 1024;

export function poolMessage(
  options: SendMailOptions,
  messageId: string,
  signal: AbortSignal,
): MailMessage<SMTPPoolSentMessageInfo> {
  const data = { signal, ...(options.dsn ? { dsn: options.dsn } : {}) };
  const raw = options.raw as Buffer;
  const { from, to } = options.envelope as { from: string; to: string[] };
  if (STORED_ADDRESS.test(from) && to.every((address) => STORED_ADDRESS.test(address))) {
    const message = {
      // A new object each time: the pool adds the DSN request to the envelope it is given.
      getEnvelope: () => ({ from, to: [...to] }),
      messageId: () => messageId,
      getHeader: (key: string) => (key.toLowerCase() === 'message-id' ? messageId : undefined),
      // In slices, one a turn of the event loop: the SMTP client escapes dots and counts bytes per chunk it is
      // given, and a stream that gives them synchronously is read to its end in one go (165 ms for 40 MiB).
      createReadStream: () => {
        let at = 0;
        return new Readable({
          read() {
            const slice = raw.subarray(at, at + STREAM_SLICE_BYTES);
            at += STREAM_SLICE_BYTES;
            const last = at >= raw.length;
            setImmediate(() => {
              this.push(slice);
              if (last) this.push(null);
            });
          },
        });
      },
    };
    return { data, message } as unknown as MailMessage<SMTPPoolSentMessageInfo>;
  }
  const message = new MimeNode('message/rfc822', { baseBoundary: 'raw' })
    .setRaw(raw)
    .setEnvelope(options.envelope!)
    .setHeader('Message-ID', messageId);
  return { data, message } as unknown as MailMessage<SMTPPoolSentMessageInfo>;
}
