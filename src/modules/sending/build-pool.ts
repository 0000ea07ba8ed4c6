import type { DkimConfig } from '../../config.ts';
import { bufferOver, copiedForTransfer, HANDOVER_BYTES, totalBytes } from '../../lib/byte-chunks.ts';
import { createThreadPool, type ThreadPool } from '../../lib/thread-pool.ts';
import type { BuildRequest } from './build-worker.ts';
import { buildMessage, type MessageOptions, messageSigners } from './mime.ts';

// Building a message grows with its size: base64 for attachments, line endings made CRLF, the DKIM body hash.
// For a 40 MiB message that is seconds of CPU, during which an event loop doing it answers no one. So a message
// larger than LARGE_MESSAGE_BYTES is built on a thread (build-worker.ts, the same buildMessage); a small one on
// the calling thread, where the hop to a thread would cost more than the build. The bytes are handed to the
// thread in copies of HANDOVER_BYTES made one at a time (lib/byte-chunks.ts), and the built message comes back without a copy: no
// step here touches the whole message at once (lib/byte-chunks.ts says why that matters).

/** Content past this many bytes (attachments, html, text, or a submitted message) is built on a thread. */
export const LARGE_MESSAGE_BYTES = 256 * 1024;

/** Threads for large messages at most, and how many may wait for one (a send waits its turn, never fails). */
const BUILD_THREADS = 1;
const BUILD_QUEUE_LIMIT = 10_000;

/** The bytes of content a message's build grows with. */
function contentBytes(options: MessageOptions): number {
  if (options.rawChunks) return totalBytes(options.rawChunks);
  if (Buffer.isBuffer(options.raw)) return options.raw.length;
  const text = (value: unknown) => (typeof value === 'string' ? value.length : 0);
  const files = (options.attachmentChunks ?? []).reduce((sum, chunks) => sum + totalBytes(chunks), 0);
  return files + text(options.html) + text(options.text);
}

export interface MessageBuilder {
  /** The message as it leaves (mime.ts's buildMessage), signed with `dkim`, else the builder's own key. */
  build(options: MessageOptions, dkim: DkimConfig | undefined): Promise<Buffer>;
  close(): Promise<void>;
}

/**
 * A transport's builder: small messages on the calling thread, large ones on a thread started when the first
 * one comes. `fallback` is the transport's own key (DKIM_*), for messages whose domain has none.
 */
export function createMessageBuilder(options: {
  fallback: DkimConfig | undefined;
  /** A build taking this long (CPU time) on its thread fails, like an attempt that timed out. */
  timeoutMs: number;
}): MessageBuilder {
  const signerFor = messageSigners(options.fallback);
  let pool: ThreadPool<BuildRequest, Uint8Array> | undefined;
  const threads = () =>
    (pool ??= createThreadPool<BuildRequest, Uint8Array>({
      name: 'message build',
      script: new URL('./build-worker.ts', import.meta.url),
      threads: BUILD_THREADS,
      queueLimit: BUILD_QUEUE_LIMIT,
      timeoutMs: options.timeoutMs,
      overBudget: () => new Error(`building the message took longer than ${options.timeoutMs} ms`),
      queueFull: () => new Error('too many large messages are waiting to be built'),
    }));
  return {
    async build(message, dkim) {
      if (contentBytes(message) <= LARGE_MESSAGE_BYTES) return buildMessage(message, signerFor(dkim));
      const transfer: ArrayBuffer[] = [];
      // The bytes go apart from the options, handed over.
      const { rawChunks, attachmentChunks, ...rest } = message;
      const raw = rawChunks && (await copiedForTransfer(rawChunks, HANDOVER_BYTES, transfer));
      const attachments: Uint8Array[][] = [];
      for (const chunks of attachmentChunks ?? []) {
        attachments.push(await copiedForTransfer(chunks, HANDOVER_BYTES, transfer));
      }
      const request: BuildRequest = { options: rest, raw, attachments, dkim: dkim ?? options.fallback };
      const built = await threads().run(request, transfer);
      return bufferOver(built);
    },
    close: async () => {
      await pool?.close();
    },
  };
}
