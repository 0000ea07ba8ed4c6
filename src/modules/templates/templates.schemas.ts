import { type Static, Type } from '@sinclair/typebox';
import { listEnvelope, ListQuery } from '../../http/list.ts';
import { answeredStringOrNumber, nullable, partialBody, timestamp } from '../../http/schema-helpers.ts';

export const MAX_NAME_LENGTH = 200;
export const MAX_SUBJECT_LENGTH = 1000;
export const MAX_BODY_LENGTH = 512 * 1024;
export const MAX_VARIABLES = 100;

// A version number a request names: the column is a 32-bit integer, and PostgreSQL refuses (a 500) a larger
// value even in a comparison.
const VERSION_RANGE = { minimum: 1, maximum: 2_147_483_647 };

/** Aliases never start with `tpl_`, so `{id}` in a path is an id or an alias without ambiguity. */
export const ALIAS_PATTERN = '^(?!tpl_)[a-z0-9_-]{1,64}$';
// Liquid's own variable syntax (`user.first_name`), so a declared name is one a template can use.
const VARIABLE_PATTERN = '^[A-Za-z_][A-Za-z0-9_-]*(\\.[A-Za-z_][A-Za-z0-9_-]*)*$';

const name = Type.String({ minLength: 1, maxLength: MAX_NAME_LENGTH, description: 'Template name.' });
const alias = Type.String({
  minLength: 1,
  maxLength: 64,
  pattern: ALIAS_PATTERN,
  description:
    'A name unique in the project that can stand for the id in paths: 1–64 lowercase letters, digits, `-` or `_`, not starting with `tpl_`.',
});
const subject = Type.String({
  maxLength: MAX_SUBJECT_LENGTH,
  description: 'Subject line of the message (Liquid).',
});
const html = Type.String({
  maxLength: MAX_BODY_LENGTH,
  description: 'HTML body (Liquid); output is HTML-escaped unless `| raw` is used. Up to 512 KiB characters.',
});
const text = Type.String({
  maxLength: MAX_BODY_LENGTH,
  description: 'Plain-text body (Liquid). Up to 512 KiB characters; generated from html when absent.',
});
const variables = Type.Array(Type.String({ minLength: 1, maxLength: 100, pattern: VARIABLE_PATTERN }), {
  maxItems: MAX_VARIABLES,
  description:
    'Names of the variables the template expects (`first_name`, `order.id`); duplicates are removed. A send that misses one is refused, unless `variable_defaults` gives it a default.',
});
/** A declared variable's default: a string or a number, as Resend's `fallback_value` is. */
const variableDefault = Type.Union([Type.String({ maxLength: 10_000 }), Type.Number()]);
const variableDefaults = Type.Record(Type.String(), variableDefault, {
  maxProperties: MAX_VARIABLES,
  description:
    'Defaults of declared variables, by name (`{ "plan": "free", "seats": 1 }`): a send that does not give the variable renders the default. Each name must be in `variables`; a value is a string or a number.',
});
export type VariableDefaults = Static<typeof variableDefaults>;

export const Template = Type.Object(
  {
    object: Type.Literal('template'),
    id: Type.String({ description: 'Template identifier (`tpl_…`).' }),
    name: Type.String({ description: 'Template name.' }),
    alias: nullable(Type.String(), 'Alias that can stand for the id in paths, or null.'),
    subject: nullable(Type.String(), 'Draft subject (Liquid), or null.'),
    html: nullable(Type.String(), 'Draft HTML body (Liquid), or null.'),
    text: nullable(Type.String(), 'Draft plain-text body (Liquid), or null.'),
    variables: Type.Array(Type.String(), { description: 'Declared variable names.' }),
    variable_defaults: Type.Record(Type.String(), answeredStringOrNumber(), {
      description: 'Defaults of declared variables, by name; `{}` when none has one.',
    }),
    created_at: timestamp('When the template was created.'),
    updated_at: timestamp('When the draft last changed.'),
    published_at: nullable(timestamp('When the latest version was published, or null when never.')),
    published_version: nullable(
      Type.Integer({ minimum: 1 }),
      'Number of the latest published version (the one sends use), or null when never published.',
    ),
    has_unpublished_changes: Type.Boolean({
      description:
        'True when the draft differs from the latest published version, or it was never published.',
    }),
  },
  { title: 'Template' },
);
export type TemplateView = Static<typeof Template>;

export const TemplateVersion = Type.Object(
  {
    object: Type.Literal('template_version'),
    template_id: Type.String(),
    version: Type.Integer({ minimum: 1, description: 'Numbered 1, 2, 3… per template.' }),
    name: Type.String(),
    subject: nullable(Type.String()),
    html: nullable(Type.String()),
    text: nullable(Type.String()),
    variables: Type.Array(Type.String()),
    variable_defaults: Type.Record(Type.String(), answeredStringOrNumber()),
    published_at: timestamp('When this version was published.'),
  },
  { title: 'TemplateVersion', description: 'An immutable published copy of a template.' },
);
export type TemplateVersionView = Static<typeof TemplateVersion>;

export const CreateTemplateBody = Type.Object(
  {
    name,
    alias: Type.Optional(nullable(alias)),
    subject: Type.Optional(nullable(subject)),
    html: Type.Optional(nullable(html)),
    text: Type.Optional(nullable(text)),
    variables: Type.Optional(variables),
    variable_defaults: Type.Optional(variableDefaults),
  },
  { additionalProperties: false, title: 'CreateTemplateRequest' },
);
export type CreateTemplateInput = Static<typeof CreateTemplateBody>;

export const UpdateTemplateBody = Type.Object(
  {
    name: Type.Optional(name),
    alias: Type.Optional(nullable(alias, 'A new alias, or null to remove it.')),
    subject: Type.Optional(nullable(subject, 'A new subject, or null to clear it.')),
    html: Type.Optional(nullable(html, 'A new HTML body, or null to clear it.')),
    text: Type.Optional(nullable(text, 'A new plain-text body, or null to clear it.')),
    variables: Type.Optional(variables),
    variable_defaults: Type.Optional(
      Type.Record(Type.String(), variableDefault, {
        maxProperties: MAX_VARIABLES,
        description:
          'New defaults, replacing the old ones (`{}` removes them all). When absent and `variables` is sent, the defaults of names no longer declared are dropped.',
      }),
    ),
  },
  { additionalProperties: false, title: 'UpdateTemplateRequest' },
);
export type UpdateTemplateInput = Static<typeof UpdateTemplateBody>;

// The seed's publish body: each field optional; the ones sent replace the draft's before publishing.
export const PublishTemplateBody = partialBody('PublishTemplateRequest', { name, subject, html, text });
export type PublishTemplateInput = Static<typeof PublishTemplateBody>;

export const PublishedTemplate = Type.Object(
  {
    object: Type.Literal('template'),
    id: Type.String(),
    published_at: timestamp('When this version was published.'),
    version: Type.Integer({ minimum: 1, description: 'The number of the version just published.' }),
  },
  { title: 'PublishedTemplate' },
);
export type PublishedTemplateView = Static<typeof PublishedTemplate>;

export const RenderTemplateBody = Type.Object(
  {
    variables: Type.Optional(
      Type.Record(Type.String(), Type.Unknown(), {
        description: 'Values for the template variables (any JSON).',
      }),
    ),
    version: Type.Optional(
      Type.Integer({
        ...VERSION_RANGE,
        description: 'A published version to render; the draft when absent.',
      }),
    ),
  },
  { additionalProperties: false, title: 'RenderTemplateRequest' },
);
export type RenderTemplateInput = Static<typeof RenderTemplateBody>;

export const RenderWarning = Type.Object(
  {
    code: Type.Literal('missing_variable', {
      description: 'A variable the template needs has no value in `variables`.',
    }),
    variable: Type.String({ description: 'The variable (`first_name`, `order.id`).' }),
    message: Type.String({ description: 'For a person.' }),
  },
  { title: 'RenderWarning' },
);

export const RenderedTemplate = Type.Object(
  {
    object: Type.Literal('rendered_template'),
    subject: nullable(Type.String()),
    html: nullable(Type.String()),
    text: nullable(Type.String({ description: 'Generated from html when the template has no text.' })),
    warnings: Type.Array(RenderWarning, {
      description:
        'What a send with these variables would be refused for, while the preview still renders (200): each declared variable, and each one the template prints unconditionally, that `variables` lacks (`missing_variable`); it renders blank here. Empty when a send would render.',
    }),
  },
  { title: 'RenderedTemplate' },
);
export type RenderedTemplateView = Static<typeof RenderedTemplate>;

export const TemplateParams = Type.Object({
  id: Type.String({ description: 'Template id (`tpl_…`) or alias.' }),
});
export const TemplateVersionParams = Type.Object({
  id: Type.String({ description: 'Template id (`tpl_…`) or alias.' }),
  version: Type.Integer(VERSION_RANGE),
});

export const VersionListQuery = Type.Object(
  {
    limit: ListQuery.properties.limit,
    after: Type.Optional(
      Type.Integer({
        ...VERSION_RANGE,
        description: 'A version number: return the versions before it (older).',
      }),
    ),
    before: Type.Optional(
      Type.Integer({
        ...VERSION_RANGE,
        description: 'A version number: return the versions after it (newer).',
      }),
    ),
  },
  { additionalProperties: false },
);

export const DeletedTemplate = Type.Object(
  { object: Type.Literal('template'), id: Type.String(), deleted: Type.Literal(true) },
  { title: 'DeletedTemplate' },
);
export const TemplateList = listEnvelope(Template);
export const TemplateVersionList = listEnvelope(TemplateVersion);
