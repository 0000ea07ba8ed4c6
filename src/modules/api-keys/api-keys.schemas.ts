import { type Static, Type } from '@sinclair/typebox';
import { listEnvelope } from '../../http/list.ts';
import { nullable, timestamp } from '../../http/schema-helpers.ts';
import type { ApiKeyRecord } from '../projects/projects.repo.ts';
import { KEY_PERMISSIONS } from '../projects/projects.service.ts';

const permission = Type.Union(
  KEY_PERMISSIONS.map((value) => Type.Literal(value)),
  {
    description:
      '`full_access`: every route. `sending_access`: only `POST /v1/emails` and `/v1/emails/batch` (and SMTP submission). `read_only`: only the routes that change nothing (every GET, template previews).',
  },
);

export const ApiKey = Type.Object(
  {
    object: Type.Literal('api_key'),
    id: Type.String({ description: 'Identifier (`key_…`).' }),
    name: nullable(Type.String(), 'What the key is for (null for keys made by the CLI without a name).'),
    permission,
    domain_id: nullable(
      Type.String(),
      'A sending_access key limited to this domain sends only from it (or its subdomains); null: any domain.',
    ),
    key_prefix: Type.String({ description: 'The first characters of the key, to tell keys apart.' }),
    created_at: timestamp('When the key was created.'),
    revoked_at: nullable(
      Type.String({ format: 'date-time' }),
      'When the key was revoked (it is refused from then on); null while it works.',
    ),
  },
  { title: 'ApiKey' },
);
export type ApiKeyView = Static<typeof ApiKey>;

export const CreatedApiKey = Type.Object(
  {
    ...ApiKey.properties,
    token: Type.String({
      description: 'The key itself, for `Authorization: Bearer`: shown only in this answer, never again.',
    }),
  },
  { title: 'CreatedApiKey' },
);

export const ApiKeyList = listEnvelope(ApiKey);

export const CreateApiKeyBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 100, description: 'What the key is for.' }),
    permission: Type.Optional({ ...permission, default: 'full_access' }),
    domain_id: Type.Optional(
      nullable(
        Type.String(),
        'Only with `sending_access`: a domain of this project (`dom_…`) that the key may send from, alone.',
      ),
    ),
  },
  { additionalProperties: false, title: 'CreateApiKeyRequest' },
);
export type CreateApiKeyInput = Static<typeof CreateApiKeyBody>;

export const ApiKeyParams = Type.Object({
  id: Type.String({ description: 'The key identifier (`key_…`).' }),
});

export const DeletedApiKey = Type.Object(
  { object: Type.Literal('api_key'), id: Type.String(), deleted: Type.Literal(true) },
  { title: 'DeletedApiKey' },
);

export const toApiKeyView = (key: ApiKeyRecord): ApiKeyView => ({
  object: 'api_key',
  id: key.id,
  name: key.name,
  permission: key.permission,
  domain_id: key.domainId,
  key_prefix: key.keyPrefix,
  created_at: key.createdAt,
  revoked_at: key.revokedAt,
});
