/**
 * A COMMIT that fails once when armed, as a lost connection or a full disk would fail it after the work was
 * done: `check(sql)` goes in a statement observer, `arm()` makes the next COMMIT throw.
 */
export function commitFailure(): { arm(): void; check(sql: string): void } {
  let armed = false;
  return {
    arm() {
      armed = true;
    },
    check(sql) {
      if (!armed || !/^\s*commit/i.test(sql)) return;
      armed = false;
      throw new Error('commit failed (test)');
    },
  };
}
