// A message-build thread (build-pool.ts): builds and signs a large message with mime.ts's buildMessage, the
// same code as the event loop runs for small ones, and answers with the bytes that leave (handed over, not
// copied).
import type { DkimConfig } from '../../config.ts';
import { bufferOver, ownedForHandover } from '../../lib/byte-chunks.ts';
import { lowerThreadPriority, serveThreadRequests } from '../../lib/thread-pool.ts';
import { buildMessage, type MessageOptions, messageSigners } from './mime.ts';

export interface BuildRequest {
  /** The message's options less its bytes, which come apart: */
  options: MessageOptions;
  /** A submission's message, in pieces. */
  raw: Uint8Array[] | undefined;
  /** Each attachment's content, in pieces (in the order of `options.attachments`). */
  attachments: Uint8Array[][];
  /** The key to sign with; unsigned when absent. */
  dkim: DkimConfig | undefined;
}

// nodemailer tells content from a path by Buffer.isBuffer: the bytes that cross as Uint8Arrays become Buffers.

lowerThreadPriority();
const signerFor = messageSigners(undefined);

serveThreadRequests<BuildRequest, Uint8Array>(
  async ({ options, raw, attachments, dkim }) => {
    const built = await buildMessage(
      {
        ...options,
        ...(raw ? { rawChunks: raw.map(bufferOver) } : {}),
        ...(attachments.length > 0
          ? { attachmentChunks: attachments.map((pieces) => pieces.map(bufferOver)) }
          : {}),
      },
      signerFor(dkim),
    );
    // Handed back whole: a Buffer that shares its memory with others is copied first.
    return ownedForHandover(built);
  },
  (built) => [built.buffer as ArrayBuffer],
);
