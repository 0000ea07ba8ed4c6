import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { TypeID } from 'typeid-js';
import { idAt, isId, newId, typeIdSuffix } from '../src/lib/ids.ts';

// Ids are encoded without typeid-js (src/lib/ids.ts): the text must stay exactly what typeid-js writes.

const uuidOf = (bytes: Uint8Array) => {
  const hex = Buffer.from(bytes).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
};

test('the TypeID suffix is the one typeid-js writes, for random and edge-case UUIDs', () => {
  const samples = [
    Buffer.alloc(16, 0),
    Buffer.alloc(16, 0xff),
    ...Array.from({ length: 5000 }, () => randomBytes(16)),
  ];
  for (const bytes of samples) {
    assert.equal(`dlv_${typeIdSuffix(bytes)}`, TypeID.fromUUID('dlv', uuidOf(bytes)).toString());
  }
});

test('new ids are valid TypeIDs (UUIDv7) that sort in creation order', () => {
  const ids = Array.from({ length: 5000 }, () => newId('att'));
  for (const id of ids.slice(0, 50)) {
    assert.ok(isId('att', id), id);
    const uuid = TypeID.fromString(id).toUUID();
    assert.match(uuid, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  }
  assert.deepEqual([...ids].sort(), ids);
  assert.equal(new Set(ids).size, ids.length);
});

test('idAt is the smallest id of its millisecond', () => {
  const at = new Date('2026-11-24T01:00:00.000Z');
  const id = idAt('att', at);
  assert.equal(
    TypeID.fromString(id).toUUID(),
    `${at
      .getTime()
      .toString(16)
      .padStart(12, '0')
      .replace(/^(.{8})(.{4})$/, '$1-$2')}-7000-8000-000000000000`,
  );
  assert.ok(idAt('att', new Date(at.getTime() - 1)) < id);
});
