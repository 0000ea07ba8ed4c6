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

/**
 * The renders of a run of a renderMany at most, and of its first. Larger runs of a cheap template (one per
 * broadcast batch of 500) saved the event loop its round trips, but on the loaded 2-core VM they raised a
 * transactional send's p99 beside the fan-out (the render thread then busy all the time, taking the event loop's
 * share of the CPU): measured in bench/README.md, "Broadcasts", and not kept.
 */
const MOST_RUN_RENDERS = 25;
/**
 * The share of the budget a run of a renderMany is sized to use, at the CPU time per render of the run before:
 * every run is held to the whole budget, so a copy may take ten times longer than those before it did.
 */
const RUN_SHARE_OF_BUDGET = 0.1;

/**
 * How many renders the next run of a renderMany holds, the last run's having taken `cpuMsPerRender` each: as
 * many as fill RUN_SHARE_OF_BUDGET of `timeoutMs`, from one to MOST_RUN_RENDERS. A costly template's copies go
 * in runs small enough to fit the budget (25 of them need not).
 */
function rendersPerRun(cpuMsPerRender: number, timeoutMs: number): number {
  if (!Number.isFinite(cpuMsPerRender)) return MOST_RUN_RENDERS;
  const fitting = Math.floor((timeoutMs * RUN_SHARE_OF_BUDGET) / Math.max(cpuMsPerRender, 0.001));
  return Math.min(MOST_RUN_RENDERS, Math.max(1, fitting));
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

  // The CPU time per render the last run of a content took, by the content object: a broadcast's fan-out
  // renders the same one batch after batch, its first run sized by the batch before.
  const cpuMsPerRender = new WeakMap<TemplateContent, number>();

  async function run(
    request: RenderRequest,
  ): Promise<{ rendered: RenderedContent | RenderedContent[]; cpuMs: number }> {
    const outcome = await pool.run(request);
    if ('rendered' in outcome) return outcome;
    const { kind, code, message, param } = outcome.refused;
    throw new DomainError(kind, code, message, param);
  }

  return {
    check: (content) => parser.check(content),
    requiredVariables: (content) => parser.requiredVariables(content),

    async render(content: TemplateContent, variables: Record<string, unknown>): Promise<RenderedContent> {
      return (await run({ content, variables })).rendered as RenderedContent;
    },

    /**
     * In runs (each held to the budget), each sized by the CPU time per render the one before took
     * (rendersPerRun), the first by the last run of the same content object, else MOST_RUN_RENDERS.
     */
    async renderMany(
      content: TemplateContent,
      variablesList: ReadonlyArray<Record<string, unknown>>,
    ): Promise<RenderedContent[]> {
      const rendered: RenderedContent[] = [];
      for (let start = 0; start < variablesList.length;) {
        const known = cpuMsPerRender.get(content);
        const size = known === undefined ? MOST_RUN_RENDERS : rendersPerRun(known, options.timeoutMs);
        const variables = variablesList.slice(start, start + size);
        start += variables.length;
        const outcome = await run({ content, variables });
        rendered.push(...(outcome.rendered as RenderedContent[]));
        cpuMsPerRender.set(content, outcome.cpuMs / variables.length);
      }
      return rendered;
    },

    close: () => pool.close(),
  };
}
