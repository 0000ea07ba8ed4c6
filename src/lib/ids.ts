import { randomFillSync } from 'node:crypto';

export type IdPrefix =
  'wh' | 'tpl' | 'msg' | 'evt' | 'proj' | 'key' | 'dlv' | 'att' | 'rcpt' | 'eev' | 'sup' | 'inb' | 'dom';

// UUIDv7 with a monotonic counter in the 12 `rand_a` bits: ids made in the same millisecond by one
// process still sort in creation order, so "newest first" by id is exact for keyset pagination.
let lastMillis = 0;
let sequence = 0;

// TypeID's alphabet (Crockford's base32, lowercase).
const BASE32 = '0123456789abcdefghjkmnpqrstvwxyz';
/** A UUID's 16 bytes, 128 bits, as TypeID writes them: 26 base32 characters, the first carrying 3 bits. */
const SUFFIX_LENGTH = 26;

/**
 * The TypeID suffix of a UUID's bytes, encoded here rather than through typeid-js, which parses the UUID's
 * hex text back into bytes and validates it: that was about a twentieth of the webhook worker's CPU (an
 * event, delivery and attempt each get an id). The same text; test/ids.test.ts compares the two.
 */
export function typeIdSuffix(bytes: Uint8Array): string {
  let suffix = BASE32[bytes[0]! >> 5]!;
  for (let index = 1; index < SUFFIX_LENGTH; index++) {
    // Character i holds bits 5i-2 … 5i+2 of the 128 (the two bits before the first are TypeID's padding).
    const bit = 5 * index - 2;
    const byte = bit >> 3;
    const word = (bytes[byte]! << 8) | (bytes[byte + 1] ?? 0);
    suffix += BASE32[(word >> (11 - (bit & 7))) & 31]!;
  }
  return suffix;
}

// Random bytes for the ids' random parts, drawn a few hundred ids at a time (as for request ids below).
const ID_BYTES = 16;
const randomPool = Buffer.alloc(ID_BYTES * 256);
let randomOffset = randomPool.length;
const uuidBytes = Buffer.alloc(ID_BYTES);

function monotonicUuidV7(): Buffer {
  let millis = Date.now();
  if (millis <= lastMillis) {
    millis = lastMillis;
    sequence += 1;
    if (sequence > 0xfff) {
      millis += 1;
      sequence = 0;
    }
  } else {
    sequence = 0;
  }
  lastMillis = millis;
  if (randomOffset === randomPool.length) {
    randomFillSync(randomPool);
    randomOffset = 0;
  }
  const bytes = uuidBytes;
  randomPool.copy(bytes, 0, randomOffset, randomOffset + ID_BYTES);
  randomOffset += ID_BYTES;
  bytes.writeUIntBE(millis, 0, 6);
  bytes[6] = 0x70 | (sequence >> 8);
  bytes[7] = sequence & 0xff;
  bytes[8] = 0x80 | (bytes[8]! & 0x3f);
  return bytes;
}

export function newId(prefix: IdPrefix): string {
  return `${prefix}_${typeIdSuffix(monotonicUuidV7())}`;
}

/**
 * The smallest id of a kind made at `date`: every id made before it sorts below it (ids are UUIDv7, time
 * first), so "older than" is a range on the primary key, with no index of its own.
 */
export function idAt(prefix: IdPrefix, date: Date): string {
  const bytes = Buffer.alloc(ID_BYTES);
  bytes.writeUIntBE(Math.max(0, date.getTime()), 0, 6);
  bytes[6] = 0x70;
  bytes[8] = 0x80;
  return `${prefix}_${typeIdSuffix(bytes)}`;
}

const ID_SHAPE = /^[a-z]+_[0-7][0-9a-hjkmnp-tv-z]{25}$/;

/** True when `value` is an id of the given kind; used to refuse cursors that cannot exist. */
export function isId(prefix: IdPrefix, value: string): boolean {
  return value.startsWith(`${prefix}_`) && ID_SHAPE.test(value);
}

const REQUEST_ID_LENGTH = 26;
// Random bytes for request ids, drawn a few hundred ids at a time: one randomBytes call and a TypeID
// encoding per request were 6 % of a short request's CPU.
const requestIdBytes = Buffer.alloc(REQUEST_ID_LENGTH * 256);
let requestIdOffset = requestIdBytes.length;

/**
 * `req_` and 26 random base32 characters (130 bits), the shape of the other ids; unlike them not
 * time-sortable, which nothing needs of a request id.
 */
export function newRequestId(): string {
  if (requestIdOffset === requestIdBytes.length) {
    randomFillSync(requestIdBytes);
    requestIdOffset = 0;
  }
  let id = 'req_';
  // 256 is a multiple of 32, so the low five bits of a random byte are uniform.
  for (let i = 0; i < REQUEST_ID_LENGTH; i++) id += BASE32[requestIdBytes[requestIdOffset++]! & 31];
  return id;
}
