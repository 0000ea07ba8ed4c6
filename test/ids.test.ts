import assert from 'node:assert/strict';
import { test } from 'node:test';
import { TypeID } from 'typeid-js';
import { idAt, isId, newId } from '../src/lib/ids.ts';

// Ids are encoded here rather than by typeid-js (for speed): they must stay valid TypeIDs of UUIDv7s, in
// creation order, and agree with idAt's lower bounds.

test('ids are TypeIDs of version 7 UUIDs, sorted in creation order, above the bound of their time', () => {
  const before = idAt('msg', new Date(Date.now() - 1));
  let previous = '';
  for (let i = 0; i < 20_000; i++) {
    const id = newId('msg');
    assert.ok(isId('msg', id), id);
    const parsed = TypeID.fromString(id);
    assert.equal(parsed.toString(), id);
    assert.equal(parsed.getType(), 'msg');
    const uuid = parsed.toUUID();
    assert.equal(uuid[14], '7', uuid);
    assert.ok('89ab'.includes(uuid[19]!), uuid);
    assert.ok(id > previous, `${previous} then ${id}`);
    assert.ok(id > before);
    previous = id;
  }
  assert.ok(previous < idAt('msg', new Date(Date.now() + 2)));
});
