// What the two SMTP servers (the inbound listener and the submission server) share about a message's DATA:
// how an answer other than 250 is given to smtp-server, and how the bytes are gathered under a size limit.

/** An error smtp-server answers with this code and text (`550 5.1.1 …`). */
export const smtpError = (code: number, message: string): Error =>
  Object.assign(new Error(message), { responseCode: code });

/**
 * Gathers a message's bytes, up to `maxBytes`: past it nothing more is kept (the rest is read and dropped, so
 * the client gets its 552 at the end of DATA rather than a cut connection). `received` gets the bytes as the
 * chunks they came in (never joined here: lib/byte-chunks.ts); a message too big, or a stream that failed, is
 * answered through `callback` and never reaches `received`.
 */
export function gatherData(
  stream: NodeJS.ReadableStream & { sizeExceeded?: boolean },
  maxBytes: number,
  callback: (error: Error | null) => void,
  received: (chunks: Buffer[], size: number) => void,
): void {
  const chunks: Buffer[] = [];
  let size = 0;
  stream.on('data', (chunk: Buffer) => {
    size += chunk.length;
    if (size <= maxBytes) chunks.push(chunk);
  });
  stream.on('error', (error: Error) => callback(error));
  stream.on('end', () => {
    if (stream.sizeExceeded || size > maxBytes) {
      callback(smtpError(552, `5.3.4 Message too big: the limit is ${maxBytes} bytes`));
      return;
    }
    received(chunks, size);
  });
}
