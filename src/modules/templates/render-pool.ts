import type { Worker } from 'node:worker_threads';
import { DomainError, RetryLaterError } from '../../lib/errors.ts';
import { createThreadPool } from '../../lib/thread-pool.ts';
import {
  createTemplateRenderer,
  type RenderedContent,
  type TemplateContent,
  type TemplateRenderer,
} from './render.ts';
import type { RenderOutcome, RenderRequest } from './render-worker.ts';

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
  /** The wall clock of the starved limit, in ms: `performance.now()` unless a test gives one. */
  wallMs?: () => number;
}

const renderTimedOut = (timeoutMs: number): DomainError =>
  new DomainError(
    'validation',
    'template_render_timeout',
    `Rendering the template took longer than ${timeoutMs} ms; loops over large ranges are the usual cause.`,
  );

/**
 * Renders templates on a few worker threads (lib/thread-pool.ts), so a tenant's template, however hostile,
 * never holds the event loop that answers everyone else: each render has `timeoutMs`, enforced by
 * terminating its thread, and at most `queueLimit` renders wait. Checks (parsing only, bounded by the parse
 * limit) stay on the calling thread. Same interface as the in-thread renderer.
 */
export function createRenderPool(options: RenderPoolOptions): TemplateRenderer & { close(): Promise<void> } {
  const parser = createTemplateRenderer();
  const pool = createThreadPool<RenderRequest, RenderOutcome>({
    name: 'template render',
    script: new URL('./render-worker.ts', import.meta.url),
    threads: options.threads,
    queueLimit: options.queueLimit,
    timeoutMs: options.timeoutMs,
    threadCpuMs: options.threadCpuMs,
    wallMs: options.wallMs,
    overBudget: () => renderTimedOut(options.timeoutMs),
    queueFull: () =>
      new RetryLaterError('render_queue_full', 'Too many template renders are waiting; retry in 1 s.', 1),
  });

  async function run(request: RenderRequest): Promise<RenderedContent | RenderedContent[]> {
    const outcome = await pool.run(request);
    if ('rendered' in outcome) return outcome.rendered;
    const { kind, code, message, param } = outcome.refused;
    throw new DomainError(kind, code, message, param);
  }

  return {
    check: (content) => parser.check(content),
    requiredVariables: (content) => parser.requiredVariables(content),

    async render(content: TemplateContent, variables: Record<string, unknown>): Promise<RenderedContent> {
      return (await run({ content, variables })) as RenderedContent;
    },

    async renderMany(
      content: TemplateContent,
      variablesList: ReadonlyArray<Record<string, unknown>>,
    ): Promise<RenderedContent[]> {
      return (await run({ content, variables: [...variablesList] })) as RenderedContent[];
    },

    close: () => pool.close(),
  };
}
