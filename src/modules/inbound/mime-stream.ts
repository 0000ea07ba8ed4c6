import { type AttachmentStream, type Headers, MailParser, type MessageText } from 'mailparser';

// Running mailparser over a hostile message, for both readers of received mail (report-parser.ts and
// received-parser.ts): the caps, the parser fed a slice at a time so that it stops at the first refusal,
// and each part handed to the reader. What a reader does with the parts is its own.

/** A refusal: the reason the message is unreadable. */
export class Refused extends Error {}

/** The caps every reader of a message sets. */
export interface MimeLimits {
  /** MIME parts, containers included (mailparser's maxChildNodes). */
  parts: number;
  /** How deep a part may sit (`1.2.1` is 3 deep). */
  depth: number;
  /** One header block, in bytes (mailparser's maxHeadSize). */
  headerBytes: number;
}

export interface MimeReader {
  /** mailparser's keepDeliveryStatus: a report's own parts come as attachments, not folded into the text. */
  keepDeliveryStatus?: boolean;
  /** The top-level header lines; may throw (a Refused) to refuse the message. */
  onHeaderLines?(lines: Array<{ key: string; line: string }>): void;
  onText?(text: MessageText): void;
  /**
   * An attachment within the depth cap: a promise while its content is read (the message is read once every
   * one has settled), or nothing when the reader left it unread. `fail` refuses the message at once.
   */
  onAttachment(attachment: AttachmentStream, fail: (error: unknown) => void): Promise<void> | undefined;
}

/**
 * Runs mailparser over `source`, fed in slices so that it stops as soon as the message is refused; resolves
 * to the top-level headers once every part has been read, or rejects with why the message was refused.
 */
export function readMime(source: Uint8Array, limits: MimeLimits, reader: MimeReader): Promise<Headers> {
  const parser = new MailParser({
    maxChildNodes: limits.parts,
    maxHeadSize: limits.headerBytes,
    ...(reader.keepDeliveryStatus ? { keepDeliveryStatus: true } : {}),
    // An attached or returned message is kept as it is (its header read at most), not parsed as a second
    // tree of parts.
    ignoreEmbedded: true,
    // None of mailparser's work on the text and html: a reader that wants text from html makes it, with its cap.
    skipHtmlToText: true,
    skipTextToHtml: true,
    skipTextLinks: true,
    skipImageLinks: true,
    checksumAlgo: false,
  });
  return new Promise((resolve, reject) => {
    let settled = false;
    let headers: Headers = new Map();
    let parserEnded = false;
    let reading = 0;
    const fail = (error: unknown) => {
      if (settled) return;
      settled = true;
      parser.removeAllListeners('data');
      reject(error);
    };
    const maybeDone = () => {
      if (settled || !parserEnded || reading > 0) return;
      settled = true;
      resolve(headers);
    };

    parser.on('headers', (read: Headers) => (headers = read));
    parser.on('headerLines', (lines: Array<{ key: string; line: string }>) => {
      try {
        reader.onHeaderLines?.(lines);
      } catch (error) {
        fail(error);
      }
    });
    parser.on('data', (data: AttachmentStream | MessageText) => {
      if (data.type === 'text') {
        reader.onText?.(data);
        return;
      }
      const partId = data.partId ?? '';
      if (partId && partId.split('.').length > limits.depth) {
        data.release?.();
        fail(new Refused(`parts nested more than ${limits.depth} levels deep`));
        return;
      }
      const read = reader.onAttachment(data, fail);
      if (read) {
        reading++;
        read.then(() => {
          reading--;
          maybeDone();
        }, fail);
      }
      data.release?.();
    });
    parser.on('error', (error: Error & { code?: string }) => fail(new Refused(parserRefusal(error, limits))));
    parser.on('end', () => {
      parserEnded = true;
      maybeDone();
    });

    feedParser(parser, source, () => settled);
  });
}

/** Bytes handed to the parser at a time: it stops taking them once the message is refused. */
const FEED_BYTES = 64 * 1024;

/**
 * Writes a message into mailparser a slice at a time, waiting for it to drain, and ends it; stops as soon as
 * `stopped()` says the message was refused (a cap broken), so a huge message costs no more than its refusal.
 */
function feedParser(parser: MailParser, source: Uint8Array, stopped: () => boolean): void {
  let offset = 0;
  const feed = () => {
    while (!stopped() && offset < source.length) {
      const slice = source.subarray(offset, offset + FEED_BYTES);
      offset += slice.length;
      if (!parser.write(slice)) {
        parser.once('drain', feed);
        return;
      }
    }
    if (!stopped()) parser.end();
  };
  feed();
}

/** Why mailparser gave up, for a person: its limits (parts, header bytes) are the caller's. */
function parserRefusal(error: Error & { code?: string }, limits: MimeLimits): string {
  if (error.code === 'EMAXLEN' && /child nodes/i.test(error.message)) {
    return `more than ${limits.parts} MIME parts`;
  }
  if (error.code === 'EMAXLEN' && /header size/i.test(error.message)) {
    return `a header block over ${limits.headerBytes / 1024} KiB (each line counts as 64 bytes at least)`;
  }
  return `not readable as MIME: ${error.message.slice(0, 200)}`;
}

/** Why a message could not be read, for a person: a refusal's reason, else what went wrong. */
export function unreadableReason(error: unknown): string {
  if (error instanceof Refused) return error.message;
  return `not readable: ${error instanceof Error ? error.message.slice(0, 200) : String(error)}`;
}

/** A header's text, whatever shape mailparser gave it (a repeated header is a list: the first counts). */
export function headerText(headers: Headers, name: string): string | undefined {
  const value = headers.get(name);
  const first = Array.isArray(value) ? value[0] : value;
  return typeof first === 'string' ? first : undefined;
}
