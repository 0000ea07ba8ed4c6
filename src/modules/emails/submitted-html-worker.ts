// A submitted-html thread (submitted-html.ts): finds a large submitted message's links, or writes one
// recipient's tracked copy of it, with the same code the event loop runs for a small one; the copy is handed
// back, not copied.
import { bufferOver, ownedForHandover } from '../../lib/byte-chunks.ts';
import { lowerThreadPriority, serveThreadRequests } from '../../lib/thread-pool.ts';
import {
  linksOfSubmitted,
  type SubmittedHtmlAnswer,
  type SubmittedHtmlRequest,
  trackedSubmission,
} from './submitted-html.ts';

lowerThreadPriority();

serveThreadRequests<SubmittedHtmlRequest, SubmittedHtmlAnswer>(
  async (request) => {
    const raw = request.raw.map(bufferOver);
    if (request.links) return { links: await linksOfSubmitted(raw) };
    const copy = Buffer.concat(await trackedSubmission(raw, request.tracking));
    // Handed back whole: a Buffer that shares its memory with others is copied first.
    return { copy: ownedForHandover(copy) };
  },
  (answer) => ('copy' in answer ? [answer.copy.buffer as ArrayBuffer] : []),
);
