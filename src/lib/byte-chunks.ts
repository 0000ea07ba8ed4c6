import { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';

// A message's bytes as the chunks they came in, never joined into one Buffer on the event loop. Joining is a
// copy, and a fresh 40 MiB Buffer costs far more than the copy: the kernel maps its pages on first touch, about
// 0.3–0.5 s for 40 MiB on the 2-vCPU VM (`Buffer.alloc` then `fill`), during which no request is answered.
// Chunks of tens or hundreds of KiB cost that a little at a time, as they arrive.

export type ByteChunks = readonly Buffer[];

/** A Buffer over the same memory as `bytes` (bytes cross threads, and come from drivers, as plain Uint8Arrays). */
export const bufferOver = (bytes: Uint8Array): Buffer =>
  Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

/** Bytes that can be handed to another thread whole: ones sharing their memory with others (a pooled Buffer) are copied. */
export const ownedForHandover = <T extends Uint8Array>(bytes: T): T | Uint8Array =>
  bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength ? bytes : new Uint8Array(bytes);

/** Bytes given either way: one Buffer is one chunk. */
export const chunksOf = (bytes: Buffer | ByteChunks): ByteChunks =>
  Buffer.isBuffer(bytes) ? [bytes] : bytes;

/** Lets the event loop answer what waits (I/O, timers) before the next chunk's work. */
export const letOthersRun = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Bytes per copy when they are handed to a thread (`copiedForTransfer`). */
export const HANDOVER_BYTES = 256 * 1024;

/**
 * Bytes copied, as they come, into pieces of `size` bytes with memory of their own: to hand to a worker thread
 * as transferred ArrayBuffers, where posting them as they are would copy them all at once into one message.
 * Each chunk's bytes go straight into the piece they fall in (one copy). `total`, when known, sizes the last
 * piece to its bytes; else a last piece partly filled is a view of its own buffer.
 */
export class PieceCopies {
  readonly pieces: Array<Uint8Array<ArrayBuffer>> = [];
  private current: Uint8Array<ArrayBuffer> | undefined;
  private filled = 0;
  private left: number;

  private readonly size: number;

  constructor(size: number, total = Infinity) {
    this.size = size;
    this.left = total;
  }

  /** Copies `chunk` in; how many pieces it completed. */
  add(chunk: Uint8Array): number {
    let completed = 0;
    for (let at = 0; at < chunk.length;) {
      // More bytes than `total` said (a caller's estimate): the rest go in pieces of full size.
      this.current ??= new Uint8Array(this.left > 0 ? Math.min(this.size, this.left) : this.size);
      const length = Math.min(this.current.length - this.filled, chunk.length - at);
      this.current.set(chunk.subarray(at, at + length), this.filled);
      at += length;
      this.filled += length;
      this.left -= length;
      if (this.filled < this.current.length) continue;
      this.pieces.push(this.current);
      this.current = undefined;
      this.filled = 0;
      completed += 1;
    }
    return completed;
  }

  /** The pieces, all of the bytes added; the buffers to hand over with them. */
  finish(): { pieces: Array<Uint8Array<ArrayBuffer>>; transfer: ArrayBuffer[] } {
    if (this.current && this.filled > 0) this.pieces.push(this.current.subarray(0, this.filled));
    this.current = undefined;
    return { pieces: this.pieces, transfer: this.pieces.map((piece) => piece.buffer) };
  }
}

/** The bytes as PieceCopies of `size`, the event loop let go after each piece; `transfer` gets their buffers. */
export async function copiedForTransfer(
  chunks: ByteChunks,
  size: number,
  transfer: ArrayBuffer[],
): Promise<Uint8Array[]> {
  const copies = new PieceCopies(size, totalBytes(chunks));
  for (const chunk of chunks) {
    // A chunk larger than a piece is copied a piece per turn of the event loop.
    for (let at = 0; at < chunk.length; at += size) {
      if (copies.add(chunk.subarray(at, at + size)) > 0) await letOthersRun();
    }
  }
  const { pieces, transfer: buffers } = copies.finish();
  for (const buffer of buffers) transfer.push(buffer);
  return pieces;
}

export const totalBytes = (chunks: ByteChunks): number =>
  chunks.reduce((sum, chunk) => sum + chunk.length, 0);

/** The first `length` bytes (all of them when there are fewer) as one Buffer: a copy of that many only. */
export function firstBytes(chunks: ByteChunks, length: number): Buffer {
  const taken: Buffer[] = [];
  let size = 0;
  for (const chunk of chunks) {
    if (size >= length) break;
    const part = chunk.subarray(0, length - size);
    taken.push(part);
    size += part.length;
  }
  return taken.length === 1 ? taken[0]! : Buffer.concat(taken, size);
}

/** The bytes from `offset` on, as chunks sharing memory with these (nothing is copied). */
export function bytesFrom(chunks: ByteChunks, offset: number): Buffer[] {
  const rest: Buffer[] = [];
  let skip = offset;
  for (const chunk of chunks) {
    if (skip >= chunk.length) {
      skip -= chunk.length;
      continue;
    }
    rest.push(skip > 0 ? chunk.subarray(skip) : chunk);
    skip = 0;
  }
  return rest;
}

/**
 * The bytes regrouped into pieces of `size` (the last one shorter): a piece inside one chunk shares its memory,
 * one that spans chunks is a copy of at most `size` bytes.
 */
export function* inPiecesOf(chunks: ByteChunks, size: number): Generator<Buffer> {
  let pending: Buffer[] = [];
  let pendingSize = 0;
  for (const chunk of chunks) {
    let at = 0;
    while (at < chunk.length) {
      const part = chunk.subarray(at, at + size - pendingSize);
      at += part.length;
      if (pendingSize === 0 && part.length === size) {
        yield part;
        continue;
      }
      pending.push(part);
      pendingSize += part.length;
      if (pendingSize === size) {
        yield Buffer.concat(pending, pendingSize);
        pending = [];
        pendingSize = 0;
      }
    }
  }
  if (pendingSize > 0) yield pending.length === 1 ? pending[0]! : Buffer.concat(pending, pendingSize);
}

/** The bytes as a stream, a chunk at a time with the event loop let go between (an answer's body). */
export function streamOf(chunks: ByteChunks): Readable {
  return Readable.from(
    (async function* () {
      for (const [index, chunk] of chunks.entries()) {
        if (index > 0) await letOthersRun();
        yield chunk;
      }
    })(),
    { objectMode: false },
  );
}

/**
 * A JSON object whose last field, `field`, is `bytes` read as UTF-8 text, written as a stream: the same JSON as
 * JSON.stringify({ ...head, [field]: text }) without the text ever being whole (a 40 MiB string is the fresh
 * memory above, and its JSON escaping as long again). UTF-8 split between chunks is decoded as one sequence.
 */
export function jsonWithTextOf(head: Record<string, unknown>, field: string, bytes: ByteChunks): Readable {
  const decoder = new StringDecoder('utf8');
  const escaped = (text: string) => JSON.stringify(text).slice(1, -1);
  return Readable.from(
    (async function* () {
      yield `${JSON.stringify({ ...head, [field]: '' }).slice(0, -2)}`;
      for (const [index, chunk] of bytes.entries()) {
        if (index > 0) await letOthersRun();
        yield escaped(decoder.write(chunk));
      }
      yield `${escaped(decoder.end())}"}`;
    })(),
    { objectMode: false },
  );
}
