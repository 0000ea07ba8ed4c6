import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import yauzl from 'yauzl';
import yazl from 'yazl';
import { AggregateRefused } from '../src/modules/dmarc/aggregate-xml.ts';
import { firstXmlOfZip } from '../src/modules/inbound/dmarc-archive.ts';
import { dmarcFixture, zipOf } from './helpers/dmarc-mail.ts';
import { seeded32 } from './helpers/random.ts';

// The DMARC reader's zip boundary (src/modules/inbound/dmarc-archive.ts, firstXmlOfZip) held equal to yauzl,
// the reference: on a corpus of zips made by yazl and by Info-ZIP's `zip` (stored and deflated, several
// entries, zip64, a large report) and on random input (bytes, and valid zips mutated), the boundary gives the
// first `.xml` entry's bytes exactly as yauzl reads them, or refuses (AggregateRefused, never another error)
// where yauzl refuses. The caps (entries, inflated size) are the boundary's own and stay under them here.

type Outcome = { bytes: Buffer } | { refused: string };

/** yauzl's reading of the first `.xml` entry (names as yauzl decodes them), or its error. */
function reference(zip: Buffer): Promise<Outcome> {
  return new Promise((resolve) => {
    let settled = false;
    const finish = (outcome: Outcome, file?: yauzl.ZipFile) => {
      if (settled) return;
      settled = true;
      file?.close();
      resolve(outcome);
    };
    try {
      yauzl.fromBuffer(zip, { lazyEntries: true, validateEntrySizes: true }, (error, file) => {
        if (error || !file) return finish({ refused: error?.message ?? 'no file' });
        file.on('error', (failure: Error) => finish({ refused: failure.message }, file));
        file.on('end', () => finish({ refused: 'no .xml entry' }, file));
        file.on('entry', (entry: yauzl.Entry) => {
          if (!/\.xml$/i.test(entry.fileName)) return file.readEntry();
          file.openReadStream(entry, (failure, stream) => {
            if (failure || !stream) return finish({ refused: failure?.message ?? 'no stream' }, file);
            const chunks: Buffer[] = [];
            stream.on('data', (chunk: Buffer) => chunks.push(chunk));
            stream.on('error', (streamError: Error) => finish({ refused: streamError.message }, file));
            stream.on('end', () => finish({ bytes: Buffer.concat(chunks) }, file));
          });
        });
        file.readEntry();
      });
    } catch (error) {
      finish({ refused: (error as Error).message });
    }
  });
}

/** The boundary's reading: the bytes, or the refusal; any other error fails the test. */
async function ours(zip: Buffer): Promise<Outcome> {
  try {
    return { bytes: await firstXmlOfZip(zip) };
  } catch (error) {
    if (error instanceof AggregateRefused) return { refused: error.message };
    throw new Error(`not a refusal: ${(error as Error).stack}`);
  }
}

/** The boundary's own caps (ARCHIVE_LIMITS), which yauzl does not have: a refusal for them is not a difference. */
const CAPPED = /^(a zip of more than \d+ files|it inflates to more than \d+ MiB)$/;

/** Whether both read the same bytes, or both refused (or ours refused at a cap). */
async function agree(zip: Buffer): Promise<{ same: boolean; library: Outcome; mine: Outcome }> {
  const [library, mine] = await Promise.all([reference(zip), ours(zip)]);
  const same =
    'bytes' in library
      ? ('bytes' in mine && library.bytes.equals(mine.bytes)) ||
        ('refused' in mine && CAPPED.test(mine.refused))
      : 'refused' in mine;
  return { same, library, mine };
}

const describeOutcome = (outcome: Outcome) =>
  'bytes' in outcome ? `${outcome.bytes.length} bytes` : `refused: ${outcome.refused}`;

/** A zip made by yazl: each entry stored or deflated, zip64 records when asked. */
function yazlZip(
  entries: Array<{ name: string; content: Buffer; compress?: boolean }>,
  options: { zip64?: boolean; comment?: string } = {},
): Promise<Buffer> {
  const zip = new yazl.ZipFile();
  for (const entry of entries) {
    zip.addBuffer(entry.content, entry.name, {
      compress: entry.compress ?? true,
      forceZip64Format: options.zip64 ?? false,
      mtime: new Date('2026-11-28T00:00:00Z'),
    });
  }
  zip.end({ forceZip64Format: options.zip64 ?? false, comment: options.comment ?? '' });
  const chunks: Buffer[] = [];
  return new Promise((resolve, reject) => {
    zip.outputStream.on('data', (chunk: Buffer) => chunks.push(chunk));
    zip.outputStream.on('end', () => resolve(Buffer.concat(chunks)));
    zip.outputStream.on('error', reject);
  });
}

const ZIP_CLI = ['/usr/bin/zip', '/bin/zip'].find((file) => existsSync(file));

/** A zip made by Info-ZIP's `zip` with these arguments (e.g. `-0` stored, `-9`, `-fz` zip64). */
function cliZip(files: Record<string, Buffer>, args: string[]): Buffer {
  const dir = mkdtempSync(path.join(tmpdir(), 'postwire-zip-'));
  try {
    for (const [name, content] of Object.entries(files)) writeFileSync(path.join(dir, name), content);
    execFileSync(ZIP_CLI!, ['-q', '-X', ...args, 'out.zip', ...Object.keys(files)], { cwd: dir });
    return readFileSync(path.join(dir, 'out.zip'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const google = Buffer.from(dmarcFixture('google'));
const yahoo = Buffer.from(dmarcFixture('yahoo'));
/** A report of about 5 MiB: the fixture's record repeated. */
function largeReport(): Buffer {
  const text = google.toString('utf8');
  const record = /<record>[\s\S]*?<\/record>/.exec(text)![0];
  const records = record.repeat(Math.ceil((5 * 1024 * 1024) / record.length));
  return Buffer.from(text.replace(record, records));
}

async function corpus(): Promise<Array<{ name: string; zip: Buffer }>> {
  const large = largeReport();
  const readme = Buffer.from('This is a DMARC aggregate report.\n');
  const cases: Array<{ name: string; zip: Buffer }> = [
    { name: 'hand-made (the test helper)', zip: zipOf('google.com!acme.example!1!2.xml', google) },
    { name: 'yazl, deflated', zip: await yazlZip([{ name: 'report.xml', content: google }]) },
    { name: 'yazl, stored', zip: await yazlZip([{ name: 'report.xml', content: google, compress: false }]) },
    {
      name: 'yazl, a readme first, then two reports (the first .xml is read)',
      zip: await yazlZip([
        { name: 'README.txt', content: readme },
        { name: 'yahoo.XML', content: yahoo, compress: false },
        { name: 'google.xml', content: google },
      ]),
    },
    { name: 'yazl, no .xml entry', zip: await yazlZip([{ name: 'README.txt', content: readme }]) },
    {
      name: 'yazl, zip64 records',
      zip: await yazlZip([{ name: 'report.xml', content: google }], { zip64: true }),
    },
    {
      name: 'yazl, zip64, stored, two entries',
      zip: await yazlZip(
        [
          { name: 'a.txt', content: readme, compress: false },
          { name: 'b.xml', content: yahoo, compress: false },
        ],
        { zip64: true },
      ),
    },
    {
      name: 'yazl, with a comment',
      zip: await yazlZip([{ name: 'r.xml', content: google }], { comment: 'report' }),
    },
    { name: 'yazl, a 5 MiB report', zip: await yazlZip([{ name: 'large.xml', content: large }]) },
    { name: 'yazl, an empty report', zip: await yazlZip([{ name: 'empty.xml', content: Buffer.alloc(0) }]) },
  ];
  if (ZIP_CLI) {
    cases.push(
      { name: 'zip -9', zip: cliZip({ 'report.xml': google }, ['-9']) },
      { name: 'zip -0 (stored)', zip: cliZip({ 'report.xml': google }, ['-0']) },
      { name: 'zip -fz (zip64)', zip: cliZip({ 'report.xml': google }, ['-fz']) },
      { name: 'zip, two entries', zip: cliZip({ 'notes.txt': readme, 'report.xml': yahoo }, []) },
      { name: 'zip, a 5 MiB report', zip: cliZip({ 'large.xml': large }, []) },
    );
  }
  return cases;
}

describe('DMARC zip reader against yauzl', () => {
  test('the corpus: every zip reads to the bytes yauzl reads, or is refused where yauzl refuses', async () => {
    const cases = await corpus();
    assert.ok(cases.length >= 10);
    for (const { name, zip } of cases) {
      const { same, library, mine } = await agree(zip);
      assert.ok(same, `${name}: yauzl ${describeOutcome(library)}, ours ${describeOutcome(mine)}`);
    }
    // The corpus is mostly readable: it checks reading, not only refusing.
    const read = await Promise.all(cases.map(async ({ zip }) => 'bytes' in (await reference(zip))));
    assert.ok(read.filter(Boolean).length >= cases.length - 1);
  });

  test('random input: bytes, and valid zips mutated, truncated and extended', async () => {
    const { random, below, pick } = seeded32(38);
    const bases = (await corpus()).map((item) => item.zip).filter((zip) => zip.length < 16 * 1024);
    const differences: string[] = [];
    let readByBoth = 0;
    const ROUNDS = 2000;
    for (let round = 0; round < ROUNDS; round++) {
      let input: Buffer;
      const kind = below(6);
      if (kind === 0) {
        // Random bytes, sometimes with a zip's first signature.
        input = Buffer.from(Array.from({ length: below(300) }, () => below(256)));
        if (random() < 0.5 && input.length >= 4) input.writeUInt32LE(0x04034b50, 0);
      } else {
        input = Buffer.from(pick(bases));
        if (kind === 1) {
          // A few bytes changed anywhere.
          for (let n = 1 + below(4); n > 0; n--) input[below(input.length)] = below(256);
        } else if (kind === 2) {
          // A byte changed in the central directory or the end record, where the structure is.
          const from = Math.max(0, input.length - 200);
          input[from + below(input.length - from)] = below(256);
        } else if (kind === 3) {
          input = input.subarray(0, below(input.length));
        } else if (kind === 4) {
          input = Buffer.concat([
            input,
            Buffer.from(Array.from({ length: 1 + below(40) }, () => below(256))),
          ]);
        } else {
          // A 16- or 32-bit field of a header set to an edge value.
          const at = below(input.length - 4);
          const value = pick([0, 1, 0xffff, 0xffffffff, 0x7fffffff]);
          if (value > 0xffff || random() < 0.5) input.writeUInt32LE(value >>> 0, at);
          else input.writeUInt16LE(value, at);
        }
      }
      const { same, library, mine } = await agree(input);
      if ('bytes' in library && same) readByBoth += 1;
      if (!same) {
        differences.push(
          `round ${round} (kind ${kind}): yauzl ${describeOutcome(library)}, ours ${describeOutcome(mine)}`,
        );
      }
    }
    assert.deepEqual(differences.slice(0, 20), [], `${differences.length} of ${ROUNDS} differ`);
    // Enough of the mutated zips stay readable for the bytes to be compared, not only the refusals.
    assert.ok(readByBoth > ROUNDS / 20, `read by both: ${readByBoth}`);
  });
});
