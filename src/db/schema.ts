import type { ColumnType, Selectable } from 'kysely';

// Timestamps are stored as ISO 8601 UTC strings with milliseconds on both engines: they compare and sort
// correctly as text, and the API returns them as stored. Arrays and objects are stored as JSON text.
// Booleans are real booleans on PostgreSQL and 0/1 on SQLite; repositories read them with Boolean().

type Bool = ColumnType<boolean | number, boolean, boolean>;

export interface ProjectsTable {
  id: string;
  name: string;
  is_default: Bool;
  created_at: string;
}

export interface ApiKeysTable {
  id: string;
  project_id: string;
  name: string | null;
  key_hash: string;
  key_prefix: string;
  created_at: string;
  revoked_at: string | null;
}

export interface WebhooksTable {
  id: string;
  project_id: string;
  url: string;
  enabled: Bool;
  events: string;
  secret_sealed: string | null;
  created_at: string;
  updated_at: string;
}

export interface TemplatesTable {
  id: string;
  project_id: string;
  name: string;
  alias: string | null;
  subject: string | null;
  html: string | null;
  text: string | null;
  variables: string;
  created_at: string;
  updated_at: string;
  published_at: string | null;
  published_version: number | null;
}

export interface TemplateVersionsTable {
  template_id: string;
  version: number;
  project_id: string;
  name: string;
  subject: string | null;
  html: string | null;
  text: string | null;
  variables: string;
  published_at: string;
}

export interface IdempotencyKeysTable {
  project_id: string;
  key: string;
  request_hash: string;
  status_code: number | null;
  response_body: string | null;
  created_at: string;
}

export interface Database {
  projects: ProjectsTable;
  api_keys: ApiKeysTable;
  webhooks: WebhooksTable;
  templates: TemplatesTable;
  template_versions: TemplateVersionsTable;
  idempotency_keys: IdempotencyKeysTable;
}

export type Row<Table extends keyof Database> = Selectable<Database[Table]>;
