import type { TemplateView } from '../templates/templates.schemas.ts';
import { unsupportedField } from './resend-errors.ts';

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * A template as Resend's SDK writes it (create and update), as Postwire's template routes take it: Resend's
 * variable objects `{ key, type, fallback_value }` become Postwire's declared names. A fallback value has no
 * place in Postwire (a declared variable must be given at send), and neither have a template's `from` and
 * `reply_to` (a send gives them): refused with what to do instead, rather than dropped.
 */
export function toPostwireTemplate(body: unknown): unknown {
  if (!isObject(body)) return body;
  const { from, reply_to: replyTo, variables, ...rest } = body;
  for (const [param, value] of [
    ['from', from],
    ['reply_to', replyTo],
  ] as const) {
    if (value !== undefined && value !== null) {
      throw unsupportedField(
        param,
        `Postwire templates do not hold ${param}; give it in each send (\`${param}\` beside \`template\`).`,
      );
    }
  }
  if (!Array.isArray(variables)) return variables === undefined ? rest : { ...rest, variables };
  return {
    ...rest,
    variables: variables.map((variable: unknown, index) => {
      if (!isObject(variable)) return variable;
      const fallback = variable.fallback_value;
      if (fallback !== undefined && fallback !== null) {
        throw unsupportedField(
          `variables[${index}].fallback_value`,
          `Postwire has no fallback values: a declared variable must be given at each send. Leave '${String(variable.key)}' undeclared and write {{ ${String(variable.key)} | default: ${JSON.stringify(fallback)} }} in the template instead.`,
        );
      }
      // Postwire's variables take any JSON value; Resend's `type` (string or number) is not kept.
      return variable.key;
    }),
  };
}

const versionId = (template: TemplateView) =>
  template.published_version === null ? 'draft' : `v${template.published_version}`;

/** A template as Resend's `templates.get` answers it. */
export function toResendTemplate(template: TemplateView) {
  return {
    object: 'template' as const,
    id: template.id,
    name: template.name,
    alias: template.alias,
    subject: template.subject,
    html: template.html ?? '',
    text: template.text,
    status: template.published_version === null ? ('draft' as const) : ('published' as const),
    // Postwire keeps names only: each is a string without a fallback, as far as Resend can tell.
    variables: template.variables.map((key) => ({
      key,
      type: 'string' as const,
      fallback_value: null,
      created_at: template.created_at,
      updated_at: template.updated_at,
    })),
    from: null,
    reply_to: null,
    published_at: template.published_at,
    created_at: template.created_at,
    updated_at: template.updated_at,
    has_unpublished_versions: template.has_unpublished_changes,
    current_version_id: versionId(template),
  };
}

/** A template in a Resend list. */
export function toResendTemplateListItem(template: TemplateView) {
  const { id, name, created_at, updated_at, status, published_at, alias } = toResendTemplate(template);
  return { id, name, created_at, updated_at, status, published_at, alias };
}
