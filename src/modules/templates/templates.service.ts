import type { Clock } from '../../lib/clock.ts';
import type { TemplateRepo } from './templates.repo.ts';

// Placeholder: the templates module is being written.
export function createTemplateService(deps: { repo: TemplateRepo; clock: Clock }) {
  return { deps };
}
export type TemplateService = ReturnType<typeof createTemplateService>;
