import { randomBytes, randomFillSync } from 'node:crypto';
import { TypeID } from 'typeid-js';

export type IdPrefix =
  'wh' | 'tpl' | 'msg' | 'evt' | 'proj' | 'key' | 'dlv' | 'att' | 'rcpt' | 'eev' | 'sup' | 'inb' | 'dom';

// UUIDv7 with a monotonic counter in the 12 `rand_a` bits: ids made in the same millisecond by one
// process still sort in creation order, so "newest first" by id is exact for keyset pagination.
let lastMillis = 0;
let sequence = 0;

function monotonicUuidV7(): string {
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
  const bytes = randomBytes(16);
  bytes.writeUIntBE(millis, 0, 6);
  bytes[6] = 0x70 | (sequence >> 8);
  bytes[7] = sequence & 0xff;
  bytes[8] = 0x80 | ((bytes[8] ?? 0) & 0x3f);
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export function newId(prefix: IdPrefix): string {
  return TypeID.fromUUID(prefix, monotonicUuidV7()).toString();
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

// TypeID's alphabet (Crockford's base32, lowercase).
const BASE32 = '0123456789abcdefghjkmnpqrstvwxyz';
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
