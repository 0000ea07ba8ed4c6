import { type AggregateReport, AggregateRefused, readAggregateXml } from '../dmarc/aggregate-xml.ts';
import { ARCHIVE_LIMITS, reportXml } from './dmarc-archive.ts';
import { readMime, Refused, unreadableReason } from './mime-stream.ts';

// A mail to dmarc@<BOUNCE_DOMAIN>: a DMARC aggregate report (RFC 7489 §7.2.1.1), its XML in an attachment
// (zip, gzip or plain). Runs on a parse thread (dmarc-reader.ts); what cannot be read, or breaks a cap, is
// unreadable with why, never an exception.

export type DmarcRead = { report: AggregateReport } | { unreadable: string };

/** The MIME caps: a report is one attachment beside a short text, from a provider's plain headers. */
const MIME_LIMITS = { parts: 20, depth: 4, headerBytes: 64 * 1024 } as const;

const ATTACHMENT = /zip|gzip|xml|octet-stream/i;
const FILENAME = /\.(zip|gz|xml)$/i;

export async function readDmarcMessage(raw: Buffer): Promise<DmarcRead> {
  let attachment: Buffer | undefined;
  try {
    await readMime(raw, MIME_LIMITS, {
      onAttachment(data, fail) {
        const wanted =
          attachment === undefined &&
          (ATTACHMENT.test(data.contentType) || FILENAME.test(data.filename ?? ''));
        if (!wanted) {
          data.content.resume();
          return undefined;
        }
        const chunks: Buffer[] = [];
        let size = 0;
        return new Promise((resolve) => {
          data.content.on('data', (chunk: Buffer) => {
            size += chunk.length;
            if (size > ARCHIVE_LIMITS.attachmentBytes) {
              fail(
                new Refused(`a report attachment over ${ARCHIVE_LIMITS.attachmentBytes / 1024 / 1024} MiB`),
              );
            } else chunks.push(chunk);
          });
          data.content.once('end', () => {
            attachment ??= Buffer.concat(chunks);
            resolve();
          });
          data.content.once('error', fail);
        });
      },
    });
  } catch (error) {
    return { unreadable: unreadableReason(error) };
  }
  if (!attachment) return { unreadable: 'no zip, gzip or XML attachment' };
  try {
    return { report: readAggregateXml(await reportXml(attachment)) };
  } catch (error) {
    if (error instanceof AggregateRefused) return { unreadable: `refused: ${error.message}` };
    return { unreadable: `not readable: ${(error as Error).message.slice(0, 200)}` };
  }
}
