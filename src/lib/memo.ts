/**
 * What was made from an immutable value, kept for as long as the value itself is: a later call with the
 * same object returns the same result without making it again. Only for values that never change (the
 * validated caches' frozen records and what is derived from them); entries go with their keys.
 */
export function createIdentityMemo<K extends object, V>(): (key: K, make: () => V) => V {
  const made = new WeakMap<K, V>();
  return (key, make) => {
    if (made.has(key)) return made.get(key)!;
    const value = make();
    made.set(key, value);
    return value;
  };
}

/**
 * What was made for each key, kept for later calls with the same key: at most `limit` of them, the oldest
 * made going first. For results that depend on their key alone (a prepared statement by its SQL text, a
 * signer by its key).
 */
export function createBoundedMemo<K, V>(limit: number): (key: K, make: () => V) => V {
  const made = new Map<K, V>();
  return (key, make) => {
    // One lookup for a hit (the common case: a sender's few URLs, a process's statements), not two.
    const hit = made.get(key);
    if (hit !== undefined || made.has(key)) return hit!;
    const value = make();
    if (made.size >= limit) made.delete(made.keys().next().value!);
    made.set(key, value);
    return value;
  };
}
