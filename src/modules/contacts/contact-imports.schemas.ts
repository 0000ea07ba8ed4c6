import { Type } from '@sinclair/typebox';
import { listEnvelope, ListQuery } from '../../http/list.ts';
import { nullable, timestamp } from '../../http/schema-helpers.ts';

const status = Type.Union(
  [Type.Literal('queued'), Type.Literal('in_progress'), Type.Literal('completed'), Type.Literal('failed')],
  {
    description:
      '`queued`, `in_progress`, then `completed` (or `failed`: the file could not be read to its end).',
  },
);

export const ContactImport = Type.Object(
  {
    object: Type.Literal('contact_import'),
    id: Type.String({ description: 'Import identifier (`cimp_…`).' }),
    status,
    created_at: timestamp('When the upload was accepted.'),
    started_at: nullable(Type.String({ format: 'date-time' }), 'When a worker first took the job up.'),
    completed_at: nullable(Type.String({ format: 'date-time' }), 'When it completed or failed.'),
    counts: Type.Object(
      {
        total: Type.Integer({ description: 'Data rows in the file (the header not counted).' }),
        read: Type.Integer({ description: 'Rows read so far.' }),
        created: Type.Integer({ description: 'Contacts created.' }),
        updated: Type.Integer({ description: 'Existing contacts updated (on_conflict update).' }),
        skipped: Type.Integer({ description: 'Rows whose address the project had (on_conflict skip).' }),
        failed: Type.Integer({ description: 'Rows that could not be imported (see errors).' }),
      },
      { description: 'Progress: `read` reaches `total` when the job completes.' },
    ),
    errors: Type.Array(
      Type.Object({
        row: Type.Integer({ description: 'The data row, from 1 (the header not counted).' }),
        reason: Type.String({ description: 'Why it was not imported.' }),
      }),
      { description: 'The first 100 rows that failed, in file order (all are counted in counts.failed).' },
    ),
    failure: nullable(Type.String(), 'Why the job failed, or null.'),
  },
  { title: 'ContactImport' },
);
export const ContactImportList = listEnvelope(ContactImport);

export const ContactImportParams = Type.Object({
  id: Type.String({ description: 'Import id (`cimp_…`).' }),
});

export const ContactImportListQuery = Type.Object(
  { ...ListQuery.properties, status: Type.Optional(status) },
  { additionalProperties: false },
);

/** The multipart form, for the OpenAPI document (the route reads it as a stream, not through this schema). */
export const CONTACT_IMPORT_FORM = {
  type: 'object',
  required: ['file'],
  properties: {
    file: {
      type: 'string',
      format: 'binary',
      description: 'The CSV: UTF-8 (a BOM is fine), a header row, up to 1,000,000 rows and 512 MiB.',
    },
    column_map: {
      type: 'string',
      description:
        'JSON: which column holds each field, `{"email":"E-mail","first_name":"First","last_name":"Last","unsubscribed":"Opted out","properties":{"plan":"Plan"}}` (a property may also be `{"column":"Plan","type":"string"}`). Without it, columns named email, first_name, last_name, unsubscribed and the declared property keys are used.',
    },
    on_conflict: {
      type: 'string',
      enum: ['update', 'upsert', 'skip'],
      description:
        'An address the project has: `update` it (the default; `upsert` is the same) or `skip` the row.',
    },
    segments: {
      type: 'string',
      description: 'JSON: segment ids (or `[{"id":"seg_…"}]`) to add every imported contact to, at most 10.',
    },
    topics: {
      type: 'string',
      description:
        'JSON: `[{"id":"top_…","subscription":"opt_in"}]`, the subscription set for every imported contact, at most 10.',
    },
  },
} as const;
