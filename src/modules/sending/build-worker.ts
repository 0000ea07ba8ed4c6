// A message-build thread (build-pool.ts): builds and signs a large message with mime.ts's buildMessage, the
// same code as the event loop runs for small ones, and answers with the bytes that leave (handed over, not
// copied).
import type { DkimConfig } from '../../config.ts';
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

// Bytes cross threads as plain Uint8Arrays; nodemailer tells content from a path by Buffer.isBuffer.
const asBuffer = (bytes: Uint8Array): Buffer => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

lowerThreadPriority();
const signerFor = messageSigners(undefined);

serveThreadRequests<BuildRequest, Uint8Array>(
  async ({ options, raw, attachments, dkim }) => {
    const built = await buildMessage(
      {
        ...options,
        ...(raw ? { rawChunks: raw.map(asBuffer) } : {}),
        ...(attachments.length > 0
          ? { attachmentChunks: attachments.map((pieces) => pieces.map(asBuffer)) }
          : {}),
      },
      signerFor(dkim),
    );
    // Handed back whole: a Buffer that shares its memory with others is copied first.
    return built.byteOffset === 0 && built.byteLength === built.buffer.byteLength
      ? built
      : Buffer.from(built);
  },
  (built) => [built.buffer as ArrayBuffer],
);
