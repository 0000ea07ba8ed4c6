/**
 * Group commit: items added while a flush runs (or within the same turn of the event loop) are written
 * together by the next flush, one at a time. Under load, many attempts' results share one transaction
 * instead of paying one each; when idle, an item is flushed on the next turn.
 */
export function createBatcher<T, R>(flush: (items: T[]) => Promise<R[]>): (item: T) => Promise<R> {
  type Entry = { item: T; resolve: (result: R) => void; reject: (error: unknown) => void };
  let pending: Entry[] = [];
  let running = false;

  async function drain(): Promise<void> {
    running = true;
    while (pending.length > 0) {
      const batch = pending;
      pending = [];
      try {
        const results = await flush(batch.map((entry) => entry.item));
        batch.forEach((entry, index) => entry.resolve(results[index]!));
      } catch (error) {
        for (const entry of batch) entry.reject(error);
      }
    }
    running = false;
  }

  return (item) =>
    new Promise<R>((resolve, reject) => {
      pending.push({ item, resolve, reject });
      if (!running) {
        running = true;
        setImmediate(() => void drain());
      }
    });
}
