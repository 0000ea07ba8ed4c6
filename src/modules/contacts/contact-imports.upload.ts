import { Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { IncomingHttpHeaders } from 'node:http';
import { Busboy, type BusboyHeaders, type BusboyInstance } from '@fastify/busboy';
import { PIECE_BYTES } from '../../db/message-pieces.ts';
import { DomainError } from '../../lib/errors.ts';
import {
  checkHeader,
  csvError,
  MAX_IMPORT_BYTES,
  MAX_IMPORT_ROWS,
  newCsvParser,
} from './contact-imports.csv.ts';

// An import's upload: a multipart/form-data body (Resend's form: `file`, then the options as text fields,
// in any order), read as it arrives. The file's bytes go to `store` a piece at a time (256 KiB) while the
// same bytes go through the CSV parser, which only counts the rows and keeps the header: so a body of any
// size holds one piece and one row in memory, and a CSV that cannot be read is known before the job exists.

/** The form fields besides the file that an upload may carry (their text, JSON for the structured ones). */
export const IMPORT_FIELDS = ['column_map', 'on_conflict', 'segments', 'topics'] as const;
export type ImportFields = Partial<Record<(typeof IMPORT_FIELDS)[number], string>>;

export interface Upload {
  fields: ImportFields;
  header: string[];
  rows: number;
  bytes: number;
}

const MAX_FIELD_BYTES = 64 * 1024;

const tooLarge = () =>
  new DomainError(
    'payload_too_large',
    'file_too_large',
    `The file is over ${MAX_IMPORT_BYTES / 1024 / 1024} MiB; split it into several imports.`,
    'file',
  );

/** Bytes gathered into pieces of PIECE_BYTES, each handed to `store` in order before more is read. */
function piecesTo(store: (seq: number, bytes: Buffer) => Promise<void>, counted: { bytes: number }) {
  let held: Buffer[] = [];
  let size = 0;
  let seq = 0;
  const flush = async () => {
    if (size === 0) return;
    const piece = Buffer.concat(held, size);
    held = [];
    size = 0;
    await store(seq, piece);
    seq += 1;
  };
  return new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      counted.bytes += chunk.length;
      if (counted.bytes > MAX_IMPORT_BYTES) return callback(tooLarge());
      const pass = async () => {
        let rest = chunk;
        while (rest.length > 0) {
          const take = Math.min(rest.length, PIECE_BYTES - size);
          held.push(rest.subarray(0, take));
          size += take;
          rest = rest.subarray(take);
          if (size === PIECE_BYTES) await flush();
        }
      };
      pass().then(() => callback(null, chunk), callback);
    },
    flush(callback) {
      flush().then(() => callback(), callback);
    },
  });
}

/** Counts the parser's records past the header, which it keeps. */
function rowCounter(into: { header?: string[]; rows: number }) {
  return new Writable({
    objectMode: true,
    write(record: string[], _encoding, callback) {
      if (into.header === undefined) {
        into.header = record;
        try {
          checkHeader(record);
        } catch (error) {
          return callback(error as Error);
        }
        return callback();
      }
      into.rows += 1;
      if (into.rows > MAX_IMPORT_ROWS) {
        return callback(
          new DomainError(
            'validation',
            'too_many_rows',
            `The file has more than ${MAX_IMPORT_ROWS.toLocaleString('en')} rows; split it into several imports.`,
            'file',
          ),
        );
      }
      callback();
    },
  });
}

/**
 * Reads an import's multipart body from `body`: its file stored through `store` and checked as CSV, its other
 * fields kept. Rejects with a DomainError (400 not CSV or no file, 413 too large, 422 too many rows); what
 * `store` was given by then is the caller's to remove.
 */
export function readUpload(
  headers: IncomingHttpHeaders,
  body: NodeJS.ReadableStream,
  store: (seq: number, bytes: Buffer) => Promise<void>,
): Promise<Upload> {
  const fields: ImportFields = {};
  const counted = { bytes: 0 };
  const csv: { header?: string[]; rows: number } = { rows: 0 };
  let busboy: BusboyInstance;
  try {
    busboy = Busboy({
      headers: headers as BusboyHeaders,
      limits: { files: 1, fields: IMPORT_FIELDS.length, fieldSize: MAX_FIELD_BYTES, parts: 8 },
    });
  } catch {
    return Promise.reject(
      new DomainError(
        'invalid_request',
        'invalid_upload',
        'Send the import as multipart/form-data with the CSV in a part named file.',
        'file',
      ),
    );
  }
  return new Promise<Upload>((resolve, reject) => {
    let file: Promise<void> | undefined;
    let failed = false;
    const fail = (error: unknown) => {
      if (failed) return;
      failed = true;
      body.unpipe?.(busboy);
      // The rest of the body is read and dropped, so the client gets to read the answer.
      body.resume();
      reject(error);
    };
    busboy.on('field', (name: string, value: string, _nameTruncated: boolean, valueTruncated: boolean) => {
      if (!(IMPORT_FIELDS as readonly string[]).includes(name)) {
        return fail(
          new DomainError(
            'invalid_request',
            'invalid_upload',
            `The form has a field '${name}'; an import takes file, ${IMPORT_FIELDS.join(', ')}.`,
            name,
          ),
        );
      }
      if (valueTruncated) {
        return fail(new DomainError('invalid_request', 'invalid_upload', `${name} is over 64 KiB.`, name));
      }
      fields[name as keyof ImportFields] = value;
    });
    busboy.on('file', (name: string, stream: NodeJS.ReadableStream) => {
      if (name !== 'file') {
        stream.resume();
        return fail(
          new DomainError(
            'invalid_request',
            'invalid_upload',
            `The CSV must be the part named file, not '${name}'.`,
            name,
          ),
        );
      }
      const parser = newCsvParser();
      file = pipeline(stream, piecesTo(store, counted), parser, rowCounter(csv)).catch((error: unknown) => {
        throw error instanceof DomainError ? error : csvError(error);
      });
      file.catch(fail);
    });
    busboy.on('error', () =>
      fail(
        new DomainError(
          'invalid_request',
          'invalid_upload',
          'The multipart/form-data body cannot be read.',
          'file',
        ),
      ),
    );
    busboy.on('finish', () => {
      if (failed) return;
      if (!file) {
        return fail(
          new DomainError(
            'invalid_request',
            'file_missing',
            'The form has no file: send the CSV as a part named file.',
            'file',
          ),
        );
      }
      file.then(() => {
        if (failed) return;
        if (csv.header === undefined) {
          return fail(
            new DomainError(
              'invalid_request',
              'invalid_csv',
              'The file is empty: it needs a header row.',
              'file',
            ),
          );
        }
        resolve({ fields, header: csv.header, rows: csv.rows, bytes: counted.bytes });
      }, fail);
    });
    body.on('error', fail);
    body.pipe(busboy);
  });
}
