/**
 * A COMMIT that fails once when armed, as a lost connection or a full disk would fail it after the work was
 * done: `check(sql)` goes in a statement observer, `arm()` makes the next COMMIT throw.
 */
export function commitFailure(
  /** The statements that commit: COMMIT, and where one commits by itself, that statement (send groups). */
  commits: RegExp = /^\s*commit/i,
): { arm(): void; check(sql: string): void } {
  let armed = false;
  return {
    arm() {
      armed = true;
    },
    check(sql) {
      if (!armed || !commits.test(sql)) return;
      armed = false;
      throw new Error('commit failed (test)');
    },
  };
}
