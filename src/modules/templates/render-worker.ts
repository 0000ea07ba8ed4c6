// A render thread of the pool (render-pool.ts): renders what the main thread sends with the tenant
// sandbox of render.ts and answers with the result or the domain error. A render that runs past its budget
// is not answered at all: the pool terminates this thread and starts another.
import { DomainError } from '../../lib/errors.ts';
import { serveThreadRequests } from '../../lib/thread-pool.ts';
import { createTemplateRenderer, type RenderedContent, type TemplateContent } from './render.ts';

export interface RenderRequest {
  content: TemplateContent;
  /** One set of variables (a render), or many (renderMany: each field parsed once). */
  variables: Record<string, unknown> | Array<Record<string, unknown>>;
}

/**
 * A render's outcome as the thread sends it: the content and the CPU time its renders took, or a domain error's
 * parts (another error fails).
 */
export type RenderOutcome =
  | { rendered: RenderedContent | RenderedContent[]; cpuMs: number }
  | { refused: { kind: DomainError['kind']; code: string; message: string; param?: string } };

const renderer = createTemplateRenderer();

serveThreadRequests<RenderRequest, RenderOutcome>(async (request) => {
  try {
    const { content, variables } = request;
    const started = process.threadCpuUsage();
    const rendered = Array.isArray(variables)
      ? await renderer.renderMany(content, variables)
      : await renderer.render(content, variables);
    const spent = process.threadCpuUsage(started);
    return { rendered, cpuMs: (spent.user + spent.system) / 1000 };
  } catch (error) {
    if (!(error instanceof DomainError)) throw error;
    const { kind, code, message, param } = error;
    return { refused: { kind, code, message, ...(param ? { param } : {}) } };
  }
});
