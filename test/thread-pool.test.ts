import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createThreadPool } from '../src/lib/thread-pool.ts';

test('threads that cannot start: the task is refused with why, not retried forever; the next task tries again', async () => {
  const pool = createThreadPool<string, string>({
    name: 'echo',
    script: new URL('./fixtures/threads/cannot-load.ts', import.meta.url),
    threads: 1,
    queueLimit: 10,
    timeoutMs: 1000,
    overBudget: () => new Error('over budget'),
    queueFull: () => new Error('queue full'),
  });
  try {
    const expected = { message: 'echo thread could not start: this thread cannot load' };
    await assert.rejects(Promise.all([pool.run('a'), pool.run('b')]), expected);
    await assert.rejects(pool.run('c'), expected);
  } finally {
    await pool.close();
  }
});
