// A render thread of the pool (render-pool.ts): renders what the main thread sends with the tenant
// sandbox of render.ts and answers with the result or the domain error. A render that runs past its budget
// is not answered at all: the pool terminates this thread and starts another.
import { parentPort } from 'node:worker_threads';
import { DomainError } from '../../lib/errors.ts';
import { createTemplateRenderer, type RenderedContent, type TemplateContent } from './render.ts';

export interface RenderRequest {
  id: number;
  content: TemplateContent;
  variables: Record<string, unknown>;
}

/** A render's outcome as the thread sends it: the content, a domain error's parts, or another failure. */
export type RenderAnswer =
  | { ready: true }
  | { id: number; rendered: RenderedContent }
  | { id: number; refused: { kind: DomainError['kind']; code: string; message: string; param?: string } }
  | { id: number; failed: string };

const renderer = createTemplateRenderer();
const answer = (message: RenderAnswer) => parentPort!.postMessage(message);

parentPort!.on('message', (request: RenderRequest) => {
  renderer.render(request.content, request.variables).then(
    (rendered) => answer({ id: request.id, rendered }),
    (error: unknown) => {
      if (!(error instanceof DomainError)) {
        answer({ id: request.id, failed: error instanceof Error ? error.message : String(error) });
        return;
      }
      const { kind, code, message, param } = error;
      answer({ id: request.id, refused: { kind, code, message, ...(param ? { param } : {}) } });
    },
  );
});
// Loaded and listening: the pool starts a render's clock only now, not while the thread boots.
answer({ ready: true });
