import { type Expression, type Kysely, type SqlBool, sql } from 'kysely';
import { bufferOver, type ByteChunks, inPiecesOf, letOthersRun } from '../lib/byte-chunks.ts';
import type { Database } from './schema.ts';
import { type PruneTarget, pruneTarget } from './prune.ts';

// Large messages kept in pieces (message_pieces). node:sqlite runs each statement on the calling thread: one
// INSERT of a 40 MiB value holds the event loop for about 550 ms and one SELECT of it 450 ms (measured on the
// 2-vCPU VM), during which no other tenant's request is answered. Written and read a piece per statement, with
// the event loop let go between statements, the longest hold is one piece's (a few milliseconds). PostgreSQL
// gains too: pg turns a bytea into hex text and back on the event loop, a piece at a time here.
//
// The pieces are written before the transaction that stores their owning row (which names them in its
// `pieces_key`) and never inside one: on SQLite a transaction holds the one connection, so every other query
// would wait for all of the pieces. When that transaction fails the caller removes them; a process that dies in
// between leaves pieces no row names, removed by retention with the rest of their kind.

/** Bytes per piece: a statement over one takes a few milliseconds on either engine. */
export const PIECE_BYTES = 256 * 1024;

/** Whether a message is kept in pieces rather than in its row: when it is larger than one piece. */
export const keptInPieces = (size: number): boolean => size > PIECE_BYTES;

export interface MessagePieces {
  /** Writes `bytes` as `owner`'s pieces, a statement each; never inside a transaction (see above). */
  write(owner: string, bytes: ByteChunks): Promise<void>;
  /** The bytes of `owner`'s pieces, read a statement each, as the pieces (never joined: lib/byte-chunks.ts). */
  read(owner: string): Promise<Buffer[]>;
  /** Writes one piece, `seq` counted from 0: for bytes that arrive as a stream (a contact import's CSV). */
  writePiece(owner: string, seq: number, bytes: Uint8Array): Promise<void>;
  /** The piece `seq` of `owner`, or undefined past the last: for bytes read back as a stream. */
  readPiece(owner: string, seq: number): Promise<Buffer | undefined>;
  /** Removes `owner`'s pieces (a row that was not stored after all). */
  remove(owner: string): Promise<void>;
  /**
   * Retention: the pieces whose owner starts with `kind:` and sorts before `kind:${before}` (ids sort by time),
   * and that `also` selects when given.
   */
  pruneTarget(kind: string, before: string, also?: Expression<SqlBool>): PruneTarget;
}

export function createMessagePieces(db: Kysely<Database>): MessagePieces {
  async function readPiece(owner: string, seq: number): Promise<Buffer | undefined> {
    const row = await db
      .selectFrom('message_pieces')
      .select('bytes')
      .where('owner', '=', owner)
      .where('seq', '=', seq)
      .executeTakeFirst();
    // node:sqlite gives a Uint8Array, pg a Buffer: a Buffer over the same memory either way.
    return row ? bufferOver(row.bytes) : undefined;
  }

  return {
    async write(owner, bytes) {
      let seq = 0;
      for (const piece of inPiecesOf(bytes, PIECE_BYTES)) {
        if (seq > 0) await letOthersRun();
        await db.insertInto('message_pieces').values({ owner, seq, bytes: piece }).execute();
        seq += 1;
      }
    },

    async writePiece(owner, seq, bytes) {
      await db.insertInto('message_pieces').values({ owner, seq, bytes }).execute();
    },

    readPiece,

    async read(owner) {
      const pieces: Buffer[] = [];
      for (let seq = 0; ; seq += 1) {
        if (seq > 0) await letOthersRun();
        const piece = await readPiece(owner, seq);
        if (!piece) break;
        pieces.push(piece);
      }
      return pieces;
    },

    async remove(owner) {
      await db.deleteFrom('message_pieces').where('owner', '=', owner).execute();
    },

    pruneTarget(kind, before, also) {
      return pruneTarget(
        db,
        'message_pieces',
        'owner',
        sql<boolean>`owner > ${`${kind}:`} AND owner < ${`${kind}:${before}`} AND ${also ?? sql`1 = 1`}`,
      );
    },
  };
}
