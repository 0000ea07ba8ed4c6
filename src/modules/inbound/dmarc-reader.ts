import { type ByteChunks, chunksOf, copiedForTransfer, HANDOVER_BYTES } from '../../lib/byte-chunks.ts';
import { DEFAULTS } from '../../config.ts';
import type { DmarcRead } from './dmarc-parser.ts';
import { createParsePool, type ReportReaderOptions } from './report-reader.ts';

// DMARC aggregate reports are read on parse threads with the other readers' budget (REPORT_PARSE_*): the
// unzip, the XML and the rows never run on the event loop that answers HTTP.

export interface DmarcReader {
  read(raw: Buffer | ByteChunks): Promise<DmarcRead>;
  close(): Promise<void>;
}

export function createDmarcReader(options: ReportReaderOptions = DEFAULTS.reportParsing): DmarcReader {
  const { pool, budgetReason } = createParsePool<Uint8Array[], DmarcRead>(
    'dmarc report read',
    new URL('./dmarc-read-worker.ts', import.meta.url),
    options,
    'DMARC reports',
  );
  return {
    async read(raw) {
      try {
        const transfer: ArrayBuffer[] = [];
        return await pool.run(await copiedForTransfer(chunksOf(raw), HANDOVER_BYTES, transfer), transfer);
      } catch (error) {
        const reason = budgetReason(error);
        if (reason === undefined) throw error;
        return { unreadable: reason };
      }
    },
    close: () => pool.close(),
  };
}
