import { randomFillSync } from 'node:crypto';
import { TypeID } from 'typeid-js';

export type IdPrefix =
  | 'wh'
  | 'tpl'
  | 'msg'
  | 'evt'
  | 'proj'
  | 'key'
  | 'dlv'
  | 'att'
  | 'rcpt'
  | 'eev'
  | 'sup'
  | 'inb'
  | 'dom'
  | 'dmr'
  | 'rte'
  | 'rcv'
  | 'con'
  | 'cprop'
  | 'cimp'
  | 'seg'
  | 'top'
  | 'bc'
  | 'log'
  | 'cev'
  | 'cevs'
  | 'aut'
  | 'arun';

// UUIDv7 with a monotonic counter in the 12 `rand_a` bits: ids made in the same millisecond by one
// process still sort in creation order, so "newest first" by id is exact for keyset pagination.
let lastMillis = 0;
let sequence = 0;

// TypeID's alphabet (Crockford's base32, lowercase).
const BASE32 = '0123456789abcdefghjkmnpqrstvwxyz';
const UUID_BYTES = 16;
// Random bytes for ids, drawn a few hundred ids at a time, and the UUID written into a buffer of its own
// and encoded straight to base32: a randomBytes call, a UUID string and TypeID's parsing of it per id were
// a tenth of an accepted send's CPU.
const randomPool = Buffer.alloc(UUID_BYTES * 256);
let randomOffset = randomPool.length;
const uuid = Buffer.alloc(UUID_BYTES);

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
  randomPool.copy(uuid, 0, randomOffset, randomOffset + UUID_BYTES);
  randomOffset += UUID_BYTES;
  uuid.writeUIntBE(millis, 0, 6);
  uuid[6] = 0x70 | (sequence >> 8);
  uuid[7] = sequence & 0xff;
  uuid[8] = 0x80 | (uuid[8]! & 0x3f);
  return uuid;
}

/** A UUID's 128 bits as TypeID's 26 base32 characters: two zero bits first, then five bits a character. */
function typeIdSuffix(bytes: Buffer): string {
  let suffix = '';
  let bits = 2;
  let value = 0;
  for (let i = 0; i < UUID_BYTES; i++) {
    value = (value << 8) | bytes[i]!;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      suffix += BASE32[(value >> bits) & 31];
    }
    value &= (1 << bits) - 1;
  }
  return suffix;
}

export function newId(prefix: IdPrefix): string {
  return `${prefix}_${typeIdSuffix(monotonicUuidV7())}`;
}

/**
 * The smallest id of a kind made at `date`: every id made before it sorts below it (ids are UUIDv7, time
 * first), so "older than" is a range on the primary key, with no index of its own.
 */
export function idAt(prefix: IdPrefix, date: Date): string {
  const bytes = Buffer.alloc(16);
  bytes.writeUIntBE(Math.max(0, date.getTime()), 0, 6);
  bytes[6] = 0x70;
  bytes[8] = 0x80;
  const hex = bytes.toString('hex');
  const uuid = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  return TypeID.fromUUID(prefix, uuid).toString();
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
