import { Worker } from 'node:worker_threads';
import { DomainError, RetryLaterError } from '../../lib/errors.ts';
import {
  createTemplateRenderer,
  type RenderedContent,
  type TemplateContent,
  type TemplateRenderer,
} from './render.ts';
import type { RenderAnswer, RenderRequest } from './render-worker.ts';

export interface RenderPoolOptions {
  /** Render threads at most (started as renders need them). */
  threads: number;
  /** Renders waiting for a thread at most; past it, a render is refused with 429. */
  queueLimit: number;
  /**
   * A render whose thread has spent this much CPU time on it is stopped by ending the thread
   * (TEMPLATE_RENDER_TIMEOUT); one the machine starves of CPU is stopped at STARVED_WALL_FACTOR times it.
   */
  timeoutMs: number;
  /** The CPU time a render thread has used so far, in ms: the thread's own clock unless a test gives one. */
  threadCpuMs?: (worker: Worker) => Promise<number>;
}

/**
 * A render is timed by its thread's CPU time, not the wall clock: on a busy machine a small template could
 * wait for a core longer than the budget and be refused for it. A hostile one spends the budget in CPU
 * time and is stopped then; in wall time, no render runs longer than this many budgets.
 */
const STARVED_WALL_FACTOR = 4;

async function ownCpuMs(worker: Worker): Promise<number> {
  const { user, system } = await worker.cpuUsage();
  return (user + system) / 1000;
}

interface Task {
  request: Omit<RenderRequest, 'id'>;
  resolve(rendered: RenderedContent): void;
  reject(error: unknown): void;
}

interface Thread {
  worker: Worker;
  ready: boolean;
  running?: { id: number; task: Task; timer: NodeJS.Timeout } | undefined;
}

interface RenderClock {
  startedAt: number;
  /** The thread's CPU time when the render was handed to it (read as it starts). */
  cpuAtStart: Promise<number>;
}

const renderTimedOut = (timeoutMs: number): DomainError =>
  new DomainError(
    'validation',
    'template_render_timeout',
    `Rendering the template took longer than ${timeoutMs} ms; loops over large ranges are the usual cause.`,
  );

/**
 * Renders templates on a few worker threads, so a tenant's template, however hostile, never holds the
 * event loop that answers everyone else: each render has `timeoutMs`, enforced by terminating its thread,
 * and at most `queueLimit` renders wait. Checks (parsing only, bounded by the parse limit) stay on the
 * calling thread. Same interface as the in-thread renderer.
 */
export function createRenderPool(options: RenderPoolOptions): TemplateRenderer & { close(): Promise<void> } {
  const parser = createTemplateRenderer();
  const threadCpuMs = options.threadCpuMs ?? ownCpuMs;
  const threads = new Set<Thread>();
  const waiting: Task[] = [];
  let nextId = 1;
  let closed = false;

  function startThread(): void {
    const thread: Thread = {
      worker: new Worker(new URL('./render-worker.ts', import.meta.url)),
      ready: false,
    };
    threads.add(thread);
    thread.worker.unref();
    thread.worker.on('message', (message: RenderAnswer) => {
      if ('ready' in message) {
        thread.ready = true;
        return pump();
      }
      const running = thread.running;
      if (!running || running.id !== message.id) return;
      clearTimeout(running.timer);
      thread.running = undefined;
      thread.worker.unref();
      if ('rendered' in message) running.task.resolve(message.rendered);
      else if ('refused' in message) {
        const { kind, code, message: text, param } = message.refused;
        running.task.reject(new DomainError(kind, code, text, param));
      } else running.task.reject(new Error(`template render failed: ${message.failed}`));
      pump();
    });
    const lost = (error: unknown) => {
      if (!threads.delete(thread)) return;
      if (thread.running) {
        clearTimeout(thread.running.timer);
        thread.running.task.reject(error instanceof Error ? error : new Error('render thread stopped'));
      }
      pump();
    };
    thread.worker.on('error', lost);
    thread.worker.on('exit', (code) => lost(new Error(`render thread exited with code ${code}`)));
  }

  /**
   * At the end of a render's budget in wall time: if its thread has not spent the budget in CPU time yet
   * (the machine was busy), waits for the rest, up to the wall limit; otherwise stops it.
   */
  async function checkBudget(thread: Thread, id: number, clock: RenderClock): Promise<void> {
    const stillRunning = () => thread.running?.id === id;
    let spentMs = Infinity;
    try {
      spentMs = (await threadCpuMs(thread.worker)) - (await clock.cpuAtStart);
    } catch {
      // The thread is gone; its exit handler answers the render.
    }
    if (!stillRunning()) return;
    const leftMs = options.timeoutMs - spentMs;
    const wallLeftMs = options.timeoutMs * STARVED_WALL_FACTOR - (performance.now() - clock.startedAt);
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
    task.reject(renderTimedOut(options.timeoutMs));
    pump();
  }

  /** Hands waiting renders to idle threads, starting threads up to the limit. */
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
      const clock: RenderClock = {
        startedAt: performance.now(),
        cpuAtStart: threadCpuMs(idle.worker).catch(() => 0),
      };
      const timer = setTimeout(() => void checkBudget(idle, id, clock), options.timeoutMs);
      idle.running = { id, task, timer };
      idle.worker.ref();
      idle.worker.postMessage({ id, ...task.request } satisfies RenderRequest);
    }
  }

  return {
    check: (content) => parser.check(content),
    requiredVariables: (content) => parser.requiredVariables(content),

    render(content: TemplateContent, variables: Record<string, unknown>): Promise<RenderedContent> {
      if (closed) return Promise.reject(new Error('the render pool is closed'));
      if (waiting.length >= options.queueLimit) {
        return Promise.reject(
          new RetryLaterError('render_queue_full', 'Too many template renders are waiting; retry in 1 s.', 1),
        );
      }
      return new Promise((resolve, reject) => {
        waiting.push({ request: { content, variables }, resolve, reject });
        pump();
      });
    },

    async close() {
      closed = true;
      for (const task of waiting.splice(0)) task.reject(new Error('the render pool is closed'));
      await Promise.all([...threads].map((thread) => thread.worker.terminate()));
      threads.clear();
    },
  };
}
