import type { FastifyInstance } from 'fastify';
import type { TemplateService } from './templates.service.ts';

// Placeholder: the templates module is being written.
export function registerTemplateRoutes(_app: FastifyInstance, _deps: { templates: TemplateService }): void {}
