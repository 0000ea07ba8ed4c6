// What the two SMTP servers (the inbound listener and the submission server) share about a message's DATA:
// how an answer other than 250 is given to smtp-server, and how the bytes are gathered under a size limit and
// the process's bound on message bytes held at once.

/** An error smtp-server answers with this code and text (`550 5.1.1 …`). */
export const smtpError = (code: number, message: string): Error =>
  Object.assign(new Error(message), { responseCode: code });

/**
 * The message bytes the SMTP listeners of a process hold at once (SMTP_BODY_MEMORY_LIMIT), as
 * HTTP_BODY_MEMORY_LIMIT bounds request bodies: a message is held from its first byte until its reply is sent,
 * and one that does not fit beside the others is refused with a 452 (the client tries again later) instead of
 * the process running out of memory. A message alone always fits (within the listener's size limit).
 */
export interface SmtpBodyMemory {
  /** Takes `bytes` more for a message already holding `own`; false when they do not fit beside the others'. */
  take(bytes: number, own: number): boolean;
  release(bytes: number): void;
  /** Bytes held now. */
  held(): number;
}

/** `limitBytes` 0: no limit. */
export function createSmtpBodyMemory(limitBytes: number): SmtpBodyMemory {
  let held = 0;
  return {
    take(bytes, own) {
      if (limitBytes > 0 && held - own > 0 && held + bytes > limitBytes) return false;
      held += bytes;
      return true;
    },
    release(bytes) {
      held -= bytes;
    },
    held: () => held,
  };
}

/** Gives no bound: for listeners started without one (tests). */
export const UNBOUNDED_SMTP_BODY_MEMORY: SmtpBodyMemory = createSmtpBodyMemory(0);

/**
 * Gathers a message's bytes, up to `maxBytes`: past it nothing more is kept (the rest is read and dropped, so
 * the client gets its 552 at the end of DATA rather than a cut connection); likewise past what `memory` lets
 * the process hold, with a 452. `received` gets the bytes as the chunks they came in (never joined here:
 * lib/byte-chunks.ts) and the callback to answer with, which gives the bytes back to `memory`; a message
 * refused, or a stream that failed, is answered through `callback` and never reaches `received`.
 */
/** smtp-server's answer to DATA: an error, or the 250's text. */
export type DataCallback = (error: Error | null, message?: string) => void;

export function gatherData(
  stream: NodeJS.ReadableStream & { sizeExceeded?: boolean },
  limits: { maxBytes: number; memory: SmtpBodyMemory },
  callback: DataCallback,
  received: (chunks: Buffer[], size: number, answer: DataCallback) => void,
): void {
  const { maxBytes, memory } = limits;
  const chunks: Buffer[] = [];
  let size = 0;
  let held = 0;
  let overMemory = false;
  let answered = false;
  const answer: DataCallback = (error, message) => {
    if (answered) return;
    answered = true;
    memory.release(held);
    held = 0;
    callback(error, message);
  };
  stream.on('data', (chunk: Buffer) => {
    // One chunk a turn of the event loop: paused, the stream stops taking bytes, so smtp-server stops
    // reading the socket, and libuv does not run up to 32 reads of 64 KiB (each scanned byte by byte for
    // the end of DATA) in one turn while every other request waits.
    stream.pause();
    setImmediate(() => stream.resume());
    size += chunk.length;
    if (size > maxBytes || overMemory) return;
    if (!memory.take(chunk.length, held)) {
      // Refused: what it held goes back at once, the rest is read and dropped.
      overMemory = true;
      chunks.length = 0;
      memory.release(held);
      held = 0;
      return;
    }
    held += chunk.length;
    chunks.push(chunk);
  });
  stream.on('error', (error: Error) => answer(error));
  stream.on('end', () => {
    if (stream.sizeExceeded || size > maxBytes) {
      answer(smtpError(552, `5.3.4 Message too big: the limit is ${maxBytes} bytes`));
      return;
    }
    if (overMemory) {
      answer(smtpError(452, '4.3.1 Too many large messages are being received at once; try again later'));
      return;
    }
    received(chunks, size, answer);
  });
}
