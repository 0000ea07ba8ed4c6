/**
 * Wakes workers in this process when new work is due, so they need not wait for their next poll. Other
 * processes learn about new work through PostgreSQL NOTIFY (or their poll on SQLite).
 */
export interface Notifier {
  notify(): void;
  /** Calls `listener` on every notify; returns the function that stops it. */
  subscribe(listener: () => void): () => void;
}

export function createNotifier(): Notifier {
  const listeners = new Set<() => void>();
  return {
    notify() {
      for (const listener of listeners) listener();
    },
    subscribe(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
}
