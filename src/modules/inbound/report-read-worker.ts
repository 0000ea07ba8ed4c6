// A thread of the report reader (report-reader.ts): reads each message the inbound worker hands it. One
// that runs past its budget, or past the thread's heap cap, is not answered: the pool ends this thread.
import { lowerThreadPriority, serveThreadRequests } from '../../lib/thread-pool.ts';
import { type ReadMessage, readMessage } from './report-parser.ts';

// Reading mail can wait; the API beside it cannot.
lowerThreadPriority();
serveThreadRequests<Uint8Array[], ReadMessage>((pieces) => readMessage(Buffer.concat(pieces)));
