/**
 * Polls `check` until it returns something truthy, which it resolves to; rejects after `timeoutMs`. For
 * outcomes the code under test signals through what it stores (a row's status, a request received), not
 * for guessing how long something takes.
 */
export async function until<T>(
  check: () => T | undefined | false | Promise<T | undefined | false>,
  timeoutMs = 8000,
  what = 'condition',
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
