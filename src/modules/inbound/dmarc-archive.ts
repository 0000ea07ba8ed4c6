import { gunzipSync } from 'node:zlib';
import yauzl from 'yauzl';
import { AggregateRefused } from '../dmarc/aggregate-xml.ts';

// A DMARC aggregate report's attachment as the large receivers send it: a zip of one XML file (Google,
// Yahoo), a gzip of it (Microsoft), or the XML itself. Told apart by their first bytes, not by the part's
// type (which receivers get wrong); a zip opened by yauzl, a gzip by node:zlib, each under an output cap, so
// a bomb stops at the cap, not at the end of the memory.

export const ARCHIVE_LIMITS = {
  /** The attachment as received (compressed). */
  attachmentBytes: 10 * 1024 * 1024,
  /** The XML once inflated: a report of 20,000 records is about 15 MiB. */
  xmlBytes: 32 * 1024 * 1024,
  /** Entries in a zip's central directory. */
  zipEntries: 16,
} as const;

const ZIP_LOCAL = 0x04034b50;
const MIB = 1024 * 1024;

function inflated(run: () => Buffer): Buffer {
  try {
    return run();
  } catch (error) {
    if ((error as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE' || error instanceof RangeError) {
      throw new AggregateRefused(`it inflates to more than ${ARCHIVE_LIMITS.xmlBytes / MIB} MiB`);
    }
    throw new AggregateRefused(`a damaged archive: ${(error as Error).message.slice(0, 120)}`);
  }
}

/**
 * The first `.xml` file of a zip, read by yauzl (stored or deflated, zip64 too; no encryption): what it
 * reads, or refused where it refuses, with the caps on top (entries, inflated bytes, counted as they come).
 * It replaced a reader of our own that test/dmarc-zip.test.ts found different from yauzl on a quarter of
 * mutated zips (no comment-length or entry-size checks, no zip64).
 */
export function firstXmlOfZip(bytes: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    let settled = false;
    let opened: yauzl.ZipFile | undefined;
    const finish = (error: Error | undefined, xml?: Buffer) => {
      if (settled) return;
      settled = true;
      opened?.close();
      if (error) reject(error instanceof AggregateRefused ? error : damaged(error));
      else resolve(xml!);
    };
    const damaged = (error: Error) => new AggregateRefused(`a damaged zip: ${error.message.slice(0, 120)}`);
    yauzl.fromBuffer(bytes, { lazyEntries: true, validateEntrySizes: true }, (error, file) => {
      if (error || !file) return finish(error ?? new Error('no zip'));
      opened = file;
      if (file.entryCount > ARCHIVE_LIMITS.zipEntries) {
        return finish(new AggregateRefused(`a zip of more than ${ARCHIVE_LIMITS.zipEntries} files`));
      }
      file.on('error', (failure: Error) => finish(failure));
      file.on('end', () => finish(new AggregateRefused('a zip without an .xml file')));
      file.on('entry', (entry: yauzl.Entry) => {
        if (!/\.xml$/i.test(entry.fileName)) return file.readEntry();
        if (entry.isEncrypted()) return finish(new AggregateRefused('an encrypted zip'));
        if (entry.uncompressedSize > ARCHIVE_LIMITS.xmlBytes) {
          return finish(
            new AggregateRefused(`it inflates to more than ${ARCHIVE_LIMITS.xmlBytes / MIB} MiB`),
          );
        }
        file.openReadStream(entry, (failure, stream) => {
          if (failure || !stream) return finish(failure ?? new Error('no stream'));
          const chunks: Buffer[] = [];
          let size = 0;
          stream.on('data', (chunk: Buffer) => {
            size += chunk.length;
            // yauzl stops a stream past the declared size; this holds even if that check were off.
            if (size > ARCHIVE_LIMITS.xmlBytes) {
              stream.destroy();
              finish(new AggregateRefused(`it inflates to more than ${ARCHIVE_LIMITS.xmlBytes / MIB} MiB`));
            } else chunks.push(chunk);
          });
          stream.on('error', (streamError: Error) => finish(streamError));
          stream.on('end', () => finish(undefined, Buffer.concat(chunks)));
        });
      });
      file.readEntry();
    });
  });
}

/** The report's XML text from its attachment's bytes. */
export async function reportXml(bytes: Buffer): Promise<string> {
  let xml: Buffer;
  if (bytes.length >= 4 && bytes.readUInt32LE(0) === ZIP_LOCAL) xml = await firstXmlOfZip(bytes);
  else if (bytes[0] === 0x1f && bytes[1] === 0x8b) {
    xml = inflated(() => gunzipSync(bytes, { maxOutputLength: ARCHIVE_LIMITS.xmlBytes }));
  } else xml = bytes;
  if (xml.length > ARCHIVE_LIMITS.xmlBytes) throw new AggregateRefused('an XML file over the cap');
  const text = xml.toString('utf8').replace(/^\uFEFF/, '');
  if (!text.trimStart().startsWith('<')) throw new AggregateRefused('neither zip, gzip nor XML');
  return text;
}
