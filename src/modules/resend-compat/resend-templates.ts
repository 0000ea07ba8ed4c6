import type { TemplateView } from '../templates/templates.schemas.ts';
import { invalidParam } from '../../lib/errors.ts';
import { unsupportedField } from './resend-errors.ts';

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

// Resend's variable types, and the type a fallback of each must have.
const FALLBACK_TYPES = { string: 'string', number: 'number' } as const;

/**
 * A template as Resend's SDK writes it (create and update), as Postwire's template routes take it: Resend's
 * variable objects `{ key, type, fallback_value }` become Postwire's declared names, and their fallbacks its
 * `variable_defaults` (a fallback not of the variable's type is refused, naming it). A template's `from` and
 * `reply_to` have no place in Postwire (a send gives them): refused with what to do instead, rather than dropped.
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
  const defaults: Record<string, unknown> = {};
  const names = variables.map((variable: unknown, index) => {
    if (!isObject(variable)) return variable;
    const { key, type, fallback_value: fallback } = variable;
    if (type !== undefined && !(typeof type === 'string' && Object.hasOwn(FALLBACK_TYPES, type))) {
      throw invalidParam(`variables[${index}].type`, "A variable's type is 'string' or 'number'.");
    }
    if (fallback !== undefined && fallback !== null) {
      const expected = FALLBACK_TYPES[(type as keyof typeof FALLBACK_TYPES | undefined) ?? 'string'];
      if (typeof fallback !== expected) {
        throw invalidParam(
          `variables[${index}].fallback_value`,
          `variables[${index}].fallback_value must be a ${expected}, as the type of '${String(key)}' says.`,
        );
      }
      if (typeof key === 'string') defaults[key] = fallback;
    }
    return key;
  });
  return { ...rest, variables: names, variable_defaults: defaults };
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
    // Postwire keeps a name and its default, not Resend's type: one with a number default is a number, the
    // others strings.
    variables: template.variables.map((key) => ({
      key,
      type: typeof template.variable_defaults[key] === 'number' ? ('number' as const) : ('string' as const),
      fallback_value: template.variable_defaults[key] ?? null,
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
