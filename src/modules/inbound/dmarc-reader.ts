import type { ByteChunks } from '../../lib/byte-chunks.ts';
import { DEFAULTS } from '../../config.ts';
import type { DmarcRead } from './dmarc-parser.ts';
import { createBudgetedReader, type ReportReaderOptions } from './report-reader.ts';

// DMARC aggregate reports are read on parse threads with the other readers' budget (REPORT_PARSE_*): the
// unzip, the XML and the rows never run on the event loop that answers HTTP.

export interface DmarcReader {
  read(raw: Buffer | ByteChunks): Promise<DmarcRead>;
  close(): Promise<void>;
}

export const createDmarcReader = (options: ReportReaderOptions = DEFAULTS.reportParsing): DmarcReader =>
  createBudgetedReader<DmarcRead>(
    'dmarc report read',
    new URL('./dmarc-read-worker.ts', import.meta.url),
    options,
    'DMARC reports',
    (reason) => ({ unreadable: reason }),
  );
