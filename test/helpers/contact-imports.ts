import { createContactImportWorker } from '../../src/modules/contacts/contact-imports.worker.ts';
import type { QueueWorker } from '../../src/queue/runtime.ts';
import type { ApiResponse, TestApp } from './app.ts';

/** POSTs a contact import as the SDKs do: multipart/form-data, the file first, then the options as text. */
export async function uploadImport(
  api: TestApp,
  csv: string,
  fields: Record<string, unknown> = {},
  key: string = api.key,
): Promise<ApiResponse> {
  const form = new FormData();
  form.append('file', new Blob([csv], { type: 'text/csv' }), 'contacts.csv');
  for (const [name, value] of Object.entries(fields)) {
    form.append(name, typeof value === 'string' ? value : JSON.stringify(value));
  }
  const response = await fetch(`${api.baseUrl}/v1/contacts/imports`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}` },
    body: form,
  });
  return { status: response.status, headers: response.headers, body: await response.json() };
}

/** A contact-import worker on the test app (not started: the caller starts and stops it). */
export const contactImportWorker = (api: TestApp): QueueWorker =>
  createContactImportWorker({
    database: api.database.handle,
    clock: api.services.clock,
    job: api.services.importJob,
    notifier: api.services.notifiers.contactImports,
  });
