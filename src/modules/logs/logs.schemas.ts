import { type Static, Type } from '@sinclair/typebox';
import { listEnvelope } from '../../http/list.ts';
import { nullable, timestamp } from '../../http/schema-helpers.ts';

const summaryFields = {
  object: Type.Literal('log'),
  id: Type.String({ description: 'Log identifier (`log_…`), the cursor of the list.' }),
  created_at: timestamp('When the request was answered.'),
  method: Type.String({ description: 'The HTTP method.' }),
  path: Type.String({
    description:
      'The path, without its query string (`/v1/emails`, `/resend/emails`); cut at 1,024 characters.',
  }),
  status: Type.Integer({ description: 'The status of the answer.' }),
  duration_ms: Type.Number({ description: 'From the request’s arrival to its answer, in milliseconds.' }),
  api_key_id: Type.String({ description: 'The key that made the request (`key_…`).' }),
  user_agent: nullable(Type.String({ description: 'The `User-Agent` header, cut at 512 characters.' })),
};

export const ApiLogSummary = Type.Object(summaryFields, { title: 'ApiLogSummary' });

const excerpt = (what: string) =>
  Type.Unknown({
    description: `An excerpt of the ${what} (JSON, at most 2 KiB): long strings, arrays and objects are cut with a marker saying what is left out, and the values of secret fields (\`secret\`, \`signing_secret\`, \`token\`, \`password\`, \`api_key\`, \`authorization\`, \`download_url\`) are \`[redacted]\`. Null when there was none.`,
  });

export const ApiLog = Type.Object(
  { ...summaryFields, request_body: excerpt('request body'), response_body: excerpt('answer') },
  { title: 'ApiLog' },
);

export const ApiLogList = listEnvelope(ApiLogSummary);

export type ApiLogSummaryView = Static<typeof ApiLogSummary>;
export type ApiLogView = Static<typeof ApiLog>;
