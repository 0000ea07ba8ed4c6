import type { Kysely } from 'kysely';
import type { Database } from '../../db/schema.ts';

// Placeholder: the templates module is being written.
export function createTemplateRepo(db: Kysely<Database>) {
  return { db };
}
export type TemplateRepo = ReturnType<typeof createTemplateRepo>;
