import { DEFAULTS } from '../../config.ts';
import { type ByteChunks, chunksOf, copiedForTransfer, HANDOVER_BYTES } from '../../lib/byte-chunks.ts';
import type { ParsedReceived, ReceivedAttachmentContent, ReceivedReadRequest } from './received-parser.ts';
import { createParsePool, type ReportReaderOptions } from './report-reader.ts';

export type {
  ParsedReceived,
  ReceivedAddress,
  ReceivedAttachment,
  ReceivedAttachmentContent,
} from './received-parser.ts';
export { RECEIVED_LIMITS } from './received-parser.ts';

// Where received messages (mail for a project's receiving addresses) are read: on worker threads
// (lib/thread-pool.ts), never on the event loop that answers HTTP, as reports are (report-reader.ts), with the
// same settings (REPORT_PARSE_*). The parser's caps (RECEIVED_LIMITS) bound the work a message can ask for;
// the thread's CPU budget and heap cap bound whatever they miss. A message stopped by either is unreadable,
// with why, like any other that breaks a cap.

export interface ReceivedReader {
  /** Reads a message; rejects only when it could not be read for a reason of ours (then read it again). */
  /** The message, or its chunks (lib/byte-chunks.ts): handed to a parse thread, never joined here. */
  read(raw: Buffer | ByteChunks): Promise<ParsedReceived>;
  /**
   * The decoded bytes of attachment `index` (0-based, in the order of `attachments`), undefined when there
   * is none, or `{ stopped }` with why when the thread's budget stopped the reading (a busy machine can make a
   * message read at receipt run past it now: the caller may try again). Rejects only for a reason of ours.
   */
  attachment(
    raw: Buffer | ByteChunks,
    index: number,
  ): Promise<ReceivedAttachmentContent | { stopped: string } | undefined>;
  close(): Promise<void>;
}

export function createReceivedReader(options: ReportReaderOptions = DEFAULTS.reportParsing): ReceivedReader {
  const { pool, budgetReason } = createParsePool<
    ReceivedReadRequest,
    ParsedReceived | ReceivedAttachmentContent | undefined
  >('received read', new URL('./received-read-worker.ts', import.meta.url), options, 'received messages');

  return {
    async read(raw) {
      try {
        const transfer: ArrayBuffer[] = [];
        const pieces = await copiedForTransfer(chunksOf(raw), HANDOVER_BYTES, transfer);
        return (await pool.run({ raw: pieces }, transfer)) as ParsedReceived;
      } catch (error) {
        const reason = budgetReason(error);
        if (reason === undefined) throw error;
        return { readable: false, reason, subject: null };
      }
    },
    async attachment(raw, index) {
      if (!Number.isInteger(index) || index < 0) return undefined;
      let found: ReceivedAttachmentContent | undefined;
      try {
        const transfer: ArrayBuffer[] = [];
        const pieces = await copiedForTransfer(chunksOf(raw), HANDOVER_BYTES, transfer);
        found = (await pool.run({ raw: pieces, index }, transfer)) as ReceivedAttachmentContent | undefined;
      } catch (error) {
        const reason = budgetReason(error);
        if (reason === undefined) throw error;
        return { stopped: reason };
      }
      if (!found) return undefined;
      // Posted back from the thread as a Uint8Array: a Buffer over the same bytes.
      const bytes = found.content as Uint8Array;
      return { ...found, content: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength) };
    },
    close: () => pool.close(),
  };
}
