/**
 * Polls `check` until it returns something truthy, which it resolves to; rejects after `timeoutMs`. For
 * outcomes the code under test signals through what it stores (a row's status, a request received), not
 * for guessing how long something takes. `timeoutMs` only guards against a hang: `Infinity` leaves that to
 * the test's own timeout. `what` names the condition in the rejection; a function is called then, so the
 * message can say what was seen last (a log's tail, the rows as they stand).
 */
export async function until<T>(
  check: () => T | undefined | false | Promise<T | undefined | false>,
  timeoutMs = 8000,
  what: string | (() => string) = 'condition',
  /** Between checks; shorter for a probe that must see a change the moment it happens. */
  intervalMs = 20,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${typeof what === 'function' ? what() : what}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
