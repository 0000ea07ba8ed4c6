import { type TSchema, Type } from '@sinclair/typebox';

export const ErrorBody = Type.Object(
  {
    error: Type.Object({
      code: Type.String({ description: 'Stable snake_case code to branch on.' }),
      message: Type.String({ description: 'What went wrong, for a person.' }),
      param: Type.Optional(Type.String({ description: 'The field at fault, as a path (`events[0]`).' })),
      request_id: Type.String({ description: 'Also sent as the `x-request-id` header.' }),
    }),
  },
  { $id: 'Error', title: 'Error' },
);

const ERROR_DESCRIPTIONS: Record<number, string> = {
  400: 'Malformed JSON.',
  401: 'Missing API key, not the Bearer scheme, or an unknown or revoked key (the message says which).',
  403: "The key's permission does not take this route (a sending_access or read_only key), or a domain-limited sending key sent from another domain.",
  404: 'No such resource in this project.',
  409: 'Conflicts with the current state.',
  413: 'Body larger than the route takes (1 MiB; 56 MiB for sends, which carry attachments).',
  415: 'A body that is not application/json.',
  422: 'The body or a parameter breaks the schema or a rule.',
  429: 'Too many requests: the rate limit, or the server is busy (request bodies in memory, template renders waiting); see retry-after.',
  503: 'The server could not do it now (a parse thread ran past its budget on a busy machine); see retry-after.',
};

/** Response schemas for the error statuses a route can answer, for serialization and the OpenAPI document. */
export function errorResponses(...statuses: number[]): Record<number, TSchema> {
  const all = [400, 401, 403, 404, 413, 415, 422, 429, ...statuses];
  return Object.fromEntries(
    [...new Set(all)].map((status) => [
      status,
      Type.Ref(ErrorBody, { description: ERROR_DESCRIPTIONS[status] }),
    ]),
  );
}
