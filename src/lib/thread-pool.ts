import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';
import { parentPort, type ResourceLimits, Worker } from 'node:worker_threads';

// Work that hostile input can make arbitrarily long (a tenant's template, a received message) runs on a few
// worker threads, never on the event loop that answers HTTP: each task has a time budget, enforced by
// ending its thread, at most `queueLimit` tasks wait, and a thread's heap can be capped. The thread's module
// answers through `serveThreadRequests`; the pool knows nothing of what the tasks are.

export interface ThreadPoolOptions {
  /** What the pool's messages and errors call its tasks (`template render`, `report read`). */
  name: string;
  /** The thread's module; it calls `serveThreadRequests`. */
  script: URL;
  /** Threads at most (started as tasks need them). */
  threads: number;
  /** Tasks waiting for a thread at most; past it, a task is refused with `queueFull()`. */
  queueLimit: number;
  /**
   * A task whose thread has spent this much CPU time on it is stopped by ending the thread, and rejected
   * with `overBudget()`; one the machine starves of CPU is stopped at STARVED_WALL_FACTOR times it.
   */
  timeoutMs: number;
  /** Caps on each thread's heap: a thread past them ends, and its task is rejected with the thread's error. */
  resourceLimits?: ResourceLimits | undefined;
  /** The CPU time a thread has used so far, in ms: the thread's own clock unless a test gives one. */
  threadCpuMs?: ((worker: Worker) => Promise<number>) | undefined;
  /** The wall clock the starved limit is measured on, in ms: `performance.now()` unless a test gives one. */
  wallMs?: (() => number) | undefined;
  overBudget(): Error;
  queueFull(): Error;
}

export interface ThreadPool<Request, Answer> {
  /**
   * Runs one task on a thread; rejects over budget, when the queue is full, or when its thread died.
   * `transfer`: memory the request hands over rather than copies (its ArrayBuffers, unusable here after).
   */
  run(request: Request, transfer?: readonly ArrayBuffer[]): Promise<Answer>;
  /** Refuses what waits and ends every thread. */
  close(): Promise<void>;
}

/** What a pool thread sends: `ready` once loaded, then one answer or failure per request. */
type ThreadMessage<Answer> =
  { ready: true } | { id: number; answer: Answer } | { id: number; failed: string };

interface ThreadRequest<Request> {
  id: number;
  request: Request;
}

/**
 * A task is timed by its thread's CPU time, not the wall clock: on a busy machine a small task could wait
 * for a core longer than the budget and be refused for it. A hostile one spends the budget in CPU time and
 * is stopped then; in wall time, no task runs longer than this many budgets.
 */
export const STARVED_WALL_FACTOR = 4;

/**
 * Threads that end before they are ready (their code cannot load: a heap cap too small for it, a broken
 * install) in a row: past this, what waits is refused with the reason instead of starting thread after
 * thread, forever, while the tasks never answer.
 */
const START_FAILURES = 3;

async function ownCpuMs(worker: Worker): Promise<number> {
  const { user, system } = await worker.cpuUsage();
  return (user + system) / 1000;
}

interface Task<Request, Answer> {
  request: Request;
  transfer: readonly ArrayBuffer[];
  resolve(answer: Answer): void;
  reject(error: unknown): void;
}

interface Thread<Request, Answer> {
  worker: Worker;
  ready: boolean;
  running?: { id: number; task: Task<Request, Answer>; timer: NodeJS.Timeout } | undefined;
}

interface TaskClock {
  startedAt: number;
  /** The thread's CPU time when the task was handed to it (read as it starts). */
  cpuAtStart: Promise<number>;
}

export function createThreadPool<Request, Answer>(options: ThreadPoolOptions): ThreadPool<Request, Answer> {
  const { name } = options;
  const threadCpuMs = options.threadCpuMs ?? ownCpuMs;
  const wallMs = options.wallMs ?? (() => performance.now());
  const threads = new Set<Thread<Request, Answer>>();
  const waiting: Array<Task<Request, Answer>> = [];
  let nextId = 1;
  let closed = false;
  let failedStarts = 0;

  function startThread(): void {
    const thread: Thread<Request, Answer> = {
      worker: new Worker(options.script, {
        ...(options.resourceLimits ? { resourceLimits: options.resourceLimits } : {}),
      }),
      ready: false,
    };
    threads.add(thread);
    thread.worker.unref();
    thread.worker.on('message', (message: ThreadMessage<Answer>) => {
      if ('ready' in message) {
        thread.ready = true;
        failedStarts = 0;
        return pump();
      }
      const running = thread.running;
      if (!running || running.id !== message.id) return;
      clearTimeout(running.timer);
      thread.running = undefined;
      thread.worker.unref();
      if ('answer' in message) running.task.resolve(message.answer);
      else running.task.reject(new Error(`${name} failed: ${message.failed}`));
      pump();
    });
    const lost = (error: unknown) => {
      if (!threads.delete(thread)) return;
      const reason = error instanceof Error ? error : new Error(`${name} thread stopped`);
      if (thread.running) {
        clearTimeout(thread.running.timer);
        thread.running.task.reject(reason);
      }
      if (!thread.ready && ++failedStarts >= START_FAILURES) {
        // The next task tries again: what made the threads fail may have passed.
        failedStarts = 0;
        const refusal = new Error(`${name} thread could not start: ${reason.message}`);
        for (const task of waiting.splice(0)) task.reject(refusal);
        return;
      }
      pump();
    };
    thread.worker.on('error', lost);
    thread.worker.on('exit', (code) => lost(new Error(`${name} thread exited with code ${code}`)));
  }

  /**
   * At the end of a task's budget in wall time: if its thread has not spent the budget in CPU time yet (the
   * machine was busy), waits for the rest, up to the wall limit; otherwise stops it.
   */
  async function checkBudget(thread: Thread<Request, Answer>, id: number, clock: TaskClock): Promise<void> {
    const stillRunning = () => thread.running?.id === id;
    let spentMs = Infinity;
    try {
      spentMs = (await threadCpuMs(thread.worker)) - (await clock.cpuAtStart);
    } catch {
      // The thread is gone; its exit handler answers the task.
    }
    if (!stillRunning()) return;
    const leftMs = options.timeoutMs - spentMs;
    const wallLeftMs = options.timeoutMs * STARVED_WALL_FACTOR - (wallMs() - clock.startedAt);
    if (leftMs >= 1 && wallLeftMs >= 1) {
      thread.running!.timer = setTimeout(
        () => void checkBudget(thread, id, clock),
        Math.min(leftMs, wallLeftMs),
      );
      return;
    }
    // Over budget: the thread may be deep in a loop that never yields; only ending it stops it.
    const { task } = thread.running!;
    threads.delete(thread);
    thread.running = undefined;
    void thread.worker.terminate();
    task.reject(options.overBudget());
    pump();
  }

  /** Hands waiting tasks to idle threads, starting threads up to the limit. */
  function pump(): void {
    if (closed) return;
    while (waiting.length > 0) {
      const idle = [...threads].find((thread) => thread.ready && !thread.running);
      if (!idle) {
        if (threads.size < options.threads) startThread();
        return;
      }
      const task = waiting.shift()!;
      const id = nextId++;
      const clock: TaskClock = {
        startedAt: wallMs(),
        cpuAtStart: threadCpuMs(idle.worker).catch(() => 0),
      };
      const timer = setTimeout(() => void checkBudget(idle, id, clock), options.timeoutMs);
      idle.running = { id, task, timer };
      idle.worker.ref();
      idle.worker.postMessage({ id, request: task.request } satisfies ThreadRequest<Request>, [
        ...task.transfer,
      ]);
    }
  }

  return {
    run(request: Request, transfer: readonly ArrayBuffer[] = []): Promise<Answer> {
      if (closed) return Promise.reject(new Error(`the ${name} pool is closed`));
      if (waiting.length >= options.queueLimit) return Promise.reject(options.queueFull());
      return new Promise((resolve, reject) => {
        waiting.push({ request, transfer, resolve, reject });
        pump();
      });
    },

    async close() {
      closed = true;
      for (const task of waiting.splice(0)) task.reject(new Error(`the ${name} pool is closed`));
      await Promise.all([...threads].map((thread) => thread.worker.terminate()));
      threads.clear();
    },
  };
}

/**
 * The thread side of a pool: answers each request with `handle`'s result (a throw is sent as a failure).
 * A task that runs past its budget is not answered at all: the pool ends the thread and starts another.
 */
export function serveThreadRequests<Request, Answer>(
  handle: (request: Request) => Answer | Promise<Answer>,
  /** Memory an answer hands over rather than copies (its ArrayBuffers). */
  transferOf: (answer: Answer) => ArrayBuffer[] = () => [],
): void {
  const port = parentPort;
  if (!port) throw new Error('serveThreadRequests runs on a worker thread');
  const send = (message: ThreadMessage<Answer>, transfer: ArrayBuffer[] = []) =>
    port.postMessage(message, transfer);
  port.on('message', ({ id, request }: ThreadRequest<Request>) => {
    Promise.resolve()
      .then(() => handle(request))
      .then(
        (answer) => send({ id, answer }, transferOf(answer)),
        (error: unknown) => send({ id, failed: error instanceof Error ? error.message : String(error) }),
      );
  });
  // Loaded and listening: the pool starts a task's clock only now, not while the thread boots.
  send({ ready: true });
}

/**
 * Gives the calling thread the lowest CPU priority (nice 19), so that on a machine with fewer free cores
 * than busy threads the event loop that answers HTTP gets the core first: off the loop is not enough when a
 * thread reading hostile input competes with it for the same core. Linux only (a thread's nice value is its
 * own there, set through its id in /proc/thread-self); elsewhere it does nothing.
 */
export function lowerThreadPriority(): void {
  try {
    const threadId = Number(readlinkSync('/proc/thread-self').split('/').pop());
    if (Number.isInteger(threadId) && threadId > 0) setPriority(threadId, 19);
  } catch {
    // Not Linux, or not allowed: the thread keeps the process's priority.
  }
}
