import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import { createSmtpBodyMemory, gatherData } from '../src/lib/smtp-data.ts';

// Both SMTP listeners gather DATA through gatherData. Taking a message's chunks as fast as they come let libuv
// run up to 32 socket reads of 64 KiB in one turn of the event loop (each scanned byte by byte by
// smtp-server), so a 40 MiB message held every other request for 45-60 ms at a time. Paused after each
// chunk, the stream stops smtp-server reading the socket until the next turn.

test('DATA is taken one chunk a turn of the event loop, however many chunks wait', async () => {
  const stream = new PassThrough();
  const chunks = Array.from({ length: 20 }, (_, i) => Buffer.alloc(64 * 1024, 65 + i));
  // All of them already waiting, as after a burst of socket reads.
  for (const chunk of chunks) stream.write(chunk);
  stream.end();

  let turn = 0;
  let counting = true;
  const count = () => {
    turn++;
    if (counting) setImmediate(count);
  };
  setImmediate(count);
  const takenAtTurn: number[] = [];
  const memory = createSmtpBodyMemory(0);
  const recorded = {
    take: (bytes: number, own: number) => {
      takenAtTurn.push(turn);
      return memory.take(bytes, own);
    },
    release: memory.release,
    held: memory.held,
  };
  let received: Buffer[];
  try {
    received = await new Promise<Buffer[]>((resolve, reject) =>
      gatherData(
        stream,
        { maxBytes: 10 * 1024 * 1024, memory: recorded },
        (error) => error && reject(error),
        (raw, _size, answer) => {
          answer(null, 'ok');
          resolve(raw);
        },
      ),
    );
  } finally {
    counting = false;
  }
  assert.deepEqual(Buffer.concat(received), Buffer.concat(chunks));
  assert.equal(takenAtTurn.length, chunks.length);
  const sameTurn = takenAtTurn.filter((at, i) => i > 0 && at === takenAtTurn[i - 1]).length;
  assert.equal(
    sameTurn,
    0,
    `chunks taken in the same turn as the one before: ${sameTurn} (turns ${takenAtTurn.join(' ')})`,
  );
  assert.equal(memory.held(), 0);
});
