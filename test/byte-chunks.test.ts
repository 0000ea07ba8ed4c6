import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { buffer, text } from 'node:stream/consumers';
import { test } from 'node:test';
import {
  copiedForTransfer,
  inPiecesOf,
  jsonWithTextOf,
  PieceCopies,
  streamOf,
} from '../src/lib/byte-chunks.ts';
import { seeded } from './helpers/random.ts';

// A message's bytes in the chunks they came in (src/lib/byte-chunks.ts): every way of regrouping, copying or
// streaming them gives back the same bytes, however the chunks were cut.

/** `bytes` cut at random places, as a socket cuts them (empty chunks too). */
function cut(bytes: Buffer, below: (n: number) => number): Buffer[] {
  const chunks: Buffer[] = [];
  for (let at = 0; at < bytes.length;) {
    const length = below(3) === 0 ? 0 : 1 + below(Math.min(bytes.length - at, 70_000));
    chunks.push(bytes.subarray(at, at + length));
    at += length;
  }
  return chunks;
}

test('copies for a thread and pieces are the bytes, in pieces of the size asked, however they were cut', async () => {
  const { below } = seeded(7);
  for (let round = 0; round < 40; round++) {
    const bytes = randomBytes(below(600_000));
    const chunks = cut(bytes, below);
    const size = [100, 1000, 65_536, 256 * 1024][below(4)]!;
    const transfer: ArrayBuffer[] = [];
    const copies = await copiedForTransfer(chunks, size, transfer);
    assert.ok(Buffer.concat(copies).equals(bytes), `round ${round}: the copies`);
    assert.ok(copies.slice(0, -1).every((copy) => copy.length === size));
    assert.deepEqual(
      transfer,
      copies.map((copy) => copy.buffer),
      'each copy has memory of its own, handed over',
    );
    assert.ok(copies.every((copy) => copy.byteOffset === 0 && copy.byteLength === copy.buffer.byteLength));
    // As a body arrives: its size unknown until its end.
    const arriving = new PieceCopies(size);
    for (const chunk of chunks) arriving.add(chunk);
    const arrived = arriving.finish();
    assert.ok(Buffer.concat(arrived.pieces).equals(bytes), `round ${round}: the pieces copied as they came`);
    assert.deepEqual(
      arrived.transfer,
      arrived.pieces.map((piece) => piece.buffer),
    );
    // Its size announced (a content-length): the last piece no larger than its bytes; more bytes than
    // announced still all kept.
    for (const announced of [bytes.length, Math.floor(bytes.length / 2) + 1]) {
      const sized = new PieceCopies(size, announced);
      for (const chunk of chunks) sized.add(chunk);
      const kept = sized.finish().pieces;
      assert.ok(Buffer.concat(kept).equals(bytes), `round ${round}: announced ${announced}`);
      assert.ok(kept.every((piece) => piece.buffer.byteLength <= size));
      if (announced === bytes.length) assert.equal(kept.at(-1)?.buffer.byteLength, kept.at(-1)?.length);
    }
    const pieces = [...inPiecesOf(chunks, size)];
    assert.ok(Buffer.concat(pieces).equals(bytes), `round ${round}: the pieces`);
    assert.ok((await buffer(streamOf(chunks))).equals(bytes), `round ${round}: the stream`);
  }
});

test("a JSON field streamed from chunks is JSON.stringify's, UTF-8 cut anywhere", async () => {
  const { below } = seeded(11);
  const pieces = ['a', 'é', '☕', '𝄞', '"', '\\', '\r\n', '\t', '\u0001', '<', '\u2028'];
  for (let round = 0; round < 40; round++) {
    const written = Array.from({ length: below(20_000) }, () => pieces[below(pieces.length)]).join('');
    // Not UTF-8 at times: a stray byte, read as U+FFFD as Buffer's toString reads it.
    const bytes =
      below(4) === 0 ? Buffer.concat([Buffer.from(written), Buffer.from([0xff])]) : Buffer.from(written);
    const head = { object: 'raw_email', id: `msg_${round}` };
    const streamed = await text(jsonWithTextOf(head, 'raw', cut(bytes, below)));
    assert.equal(streamed, JSON.stringify({ ...head, raw: bytes.toString('utf8') }), `round ${round}`);
  }
});
