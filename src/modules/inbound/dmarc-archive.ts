import { gunzipSync, inflateRawSync } from 'node:zlib';
import { AggregateRefused } from '../dmarc/aggregate-xml.ts';

// A DMARC aggregate report's attachment as the large receivers send it: a zip of one XML file (Google,
// Yahoo), a gzip of it (Microsoft), or the XML itself. Told apart by their first bytes, not by the part's
// type (which receivers get wrong), and opened with node:zlib under an output cap, so a zip bomb stops at
// the cap, not at the end of the memory.

export const ARCHIVE_LIMITS = {
  /** The attachment as received (compressed). */
  attachmentBytes: 10 * 1024 * 1024,
  /** The XML once inflated: a report of 20,000 records is about 15 MiB. */
  xmlBytes: 32 * 1024 * 1024,
  /** Entries in a zip's central directory. */
  zipEntries: 16,
} as const;

const ZIP_LOCAL = 0x04034b50;
const ZIP_CENTRAL = 0x02014b50;
const ZIP_END = 0x06054b50;

function inflated(run: () => Buffer): Buffer {
  try {
    return run();
  } catch (error) {
    if ((error as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE' || error instanceof RangeError) {
      throw new AggregateRefused(`it inflates to more than ${ARCHIVE_LIMITS.xmlBytes / 1024 / 1024} MiB`);
    }
    throw new AggregateRefused(`a damaged archive: ${(error as Error).message.slice(0, 120)}`);
  }
}

/** The first `.xml` file of a zip (stored or deflated; no encryption, no zip64). */
function unzip(bytes: Buffer): Buffer {
  const searchFrom = Math.max(0, bytes.length - 22 - 0xffff);
  let end = -1;
  for (let at = bytes.length - 22; at >= searchFrom; at--) {
    if (bytes.readUInt32LE(at) === ZIP_END) {
      end = at;
      break;
    }
  }
  if (end < 0) throw new AggregateRefused('a zip without its central directory');
  const entries = bytes.readUInt16LE(end + 10);
  if (entries > ARCHIVE_LIMITS.zipEntries)
    throw new AggregateRefused(`a zip of more than ${ARCHIVE_LIMITS.zipEntries} files`);
  let at = bytes.readUInt32LE(end + 16);
  for (let index = 0; index < entries; index++) {
    if (at + 46 > bytes.length || bytes.readUInt32LE(at) !== ZIP_CENTRAL)
      throw new AggregateRefused('a damaged zip');
    const flags = bytes.readUInt16LE(at + 8);
    const method = bytes.readUInt16LE(at + 10);
    const compressed = bytes.readUInt32LE(at + 20);
    const nameLength = bytes.readUInt16LE(at + 28);
    const skip = nameLength + bytes.readUInt16LE(at + 30) + bytes.readUInt16LE(at + 32);
    const name = bytes.subarray(at + 46, at + 46 + nameLength).toString('latin1');
    const local = bytes.readUInt32LE(at + 42);
    at += 46 + skip;
    if (!/\.xml$/i.test(name)) continue;
    if (flags & 1) throw new AggregateRefused('an encrypted zip');
    if (compressed === 0xffffffff) throw new AggregateRefused('a zip64 archive');
    if (local + 30 > bytes.length || bytes.readUInt32LE(local) !== ZIP_LOCAL)
      throw new AggregateRefused('a damaged zip');
    const start = local + 30 + bytes.readUInt16LE(local + 26) + bytes.readUInt16LE(local + 28);
    const data = bytes.subarray(start, start + compressed);
    if (method === 0) {
      if (data.length > ARCHIVE_LIMITS.xmlBytes) throw new AggregateRefused('an XML file over the cap');
      return data;
    }
    if (method !== 8) throw new AggregateRefused(`a zip compressed with method ${method}`);
    return inflated(() => inflateRawSync(data, { maxOutputLength: ARCHIVE_LIMITS.xmlBytes }));
  }
  throw new AggregateRefused('a zip without an .xml file');
}

/** The report's XML text from its attachment's bytes. */
export function reportXml(bytes: Buffer): string {
  let xml: Buffer;
  if (bytes.length >= 4 && bytes.readUInt32LE(0) === ZIP_LOCAL) xml = unzip(bytes);
  else if (bytes[0] === 0x1f && bytes[1] === 0x8b) {
    xml = inflated(() => gunzipSync(bytes, { maxOutputLength: ARCHIVE_LIMITS.xmlBytes }));
  } else xml = bytes;
  if (xml.length > ARCHIVE_LIMITS.xmlBytes) throw new AggregateRefused('an XML file over the cap');
  const text = xml.toString('utf8').replace(/^\uFEFF/, '');
  if (!text.trimStart().startsWith('<')) throw new AggregateRefused('neither zip, gzip nor XML');
  return text;
}
