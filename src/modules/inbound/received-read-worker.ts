// A thread of the received-message reader (received-reader.ts): reads each message, or one attachment of
// it, as asked. One that runs past its budget, or past the thread's heap cap, is not answered: the pool ends
// this thread.
import { lowerThreadPriority, serveThreadRequests } from '../../lib/thread-pool.ts';
import {
  type ParsedReceived,
  type ReceivedAttachmentContent,
  type ReceivedReadRequest,
  readReceived,
  readReceivedAttachment,
} from './received-parser.ts';

// Reading mail can wait; the API beside it cannot.
lowerThreadPriority();
serveThreadRequests<ReceivedReadRequest, ParsedReceived | ReceivedAttachmentContent | undefined>((request) =>
  request.index === undefined
    ? readReceived(Buffer.concat(request.raw))
    : readReceivedAttachment(Buffer.concat(request.raw), request.index),
);
