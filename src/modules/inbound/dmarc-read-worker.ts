// A thread of the DMARC report reader (dmarc-reader.ts): reads each aggregate report the inbound worker hands
// it. One that runs past its budget, or past the thread's heap cap, is not answered: the pool ends this thread.
import { lowerThreadPriority, serveThreadRequests } from '../../lib/thread-pool.ts';
import { type DmarcRead, readDmarcMessage } from './dmarc-parser.ts';

lowerThreadPriority();
serveThreadRequests<Uint8Array[], DmarcRead>((pieces) => readDmarcMessage(Buffer.concat(pieces)));
