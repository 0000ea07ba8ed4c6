import { htmlToText } from 'html-to-text';
import { Liquid, LiquidError, Output, type Template } from 'liquidjs';
import { DomainError } from '../../lib/errors.ts';

export type TemplateField = 'subject' | 'html' | 'text';

export interface TemplateContent {
  subject: string | null;
  html: string | null;
  text: string | null;
}

export interface RenderedContent {
  subject: string | null;
  html: string | null;
  /** The template's own text, or one generated from the rendered html when it has none. */
  text: string | null;
}

export interface TemplateRendererOptions {
  /** Characters one field may have (LiquidJS `parseLimit`). */
  parseLimit?: number;
  /** Allocation budget of one field's render (LiquidJS `memoryLimit`). */
  memoryLimit?: number;
}

// Fields in the order they are checked, so the first fault reported is stable.
const FIELDS: TemplateField[] = ['subject', 'html', 'text'];

// Tenant templates are untrusted: these tags read other templates (the file system, by default) and
// have no meaning for a stored template, so they are refused at parse time instead of failing at send.
const FORBIDDEN_TAGS = ['include', 'render', 'layout'];

export const templateSyntaxError = (field: TemplateField, message: string): DomainError =>
  new DomainError(
    'validation',
    'template_syntax_error',
    `The ${field} is not valid Liquid: ${message}`,
    field,
  );

export const templateRenderError = (field: TemplateField, message: string): DomainError =>
  new DomainError('validation', 'template_render_error', `Rendering the ${field} failed: ${message}`, field);

export const templateEmpty = (): DomainError =>
  new DomainError('validation', 'template_empty', 'A template needs an html or a text body (or both).');

/** True when `path` (`order.id`) names a value present in `variables` (null counts: it was given). */
export function hasVariable(variables: Record<string, unknown>, path: string): boolean {
  let node: unknown = variables;
  for (const key of path.split('.')) {
    if (typeof node !== 'object' || node === null || !Object.hasOwn(node, key)) return false;
    node = (node as Record<string, unknown>)[key];
  }
  return true;
}

/**
 * `variables` with each default (by declared name, `order.id` included) added where `variables` gives no value:
 * what a send or a preview renders. A value given, null included, wins; a path through a non-object is left as
 * it is. `variables` is not changed.
 */
export function withDefaults(
  variables: Record<string, unknown>,
  defaults: Readonly<Record<string, string | number>>,
): Record<string, unknown> {
  const names = Object.keys(defaults).filter((name) => !hasVariable(variables, name));
  if (names.length === 0) return variables;
  const result: Record<string, unknown> = structuredClone(variables);
  for (const name of names) {
    const keys = name.split('.');
    const last = keys.pop()!;
    let node: Record<string, unknown> | undefined = result;
    for (const key of keys) {
      if (!Object.hasOwn(node, key)) setOwn(node, key, {});
      const next: unknown = node[key];
      node =
        typeof next === 'object' && next !== null && !Array.isArray(next)
          ? (next as Record<string, unknown>)
          : undefined;
      if (!node) break;
    }
    if (node) setOwn(node, last, defaults[name]);
  }
  return result;
}

// A property of the object itself even for a name like `__proto__`, which an assignment would not make.
const setOwn = (node: Record<string, unknown>, key: string, value: unknown): void => {
  Object.defineProperty(node, key, { value, enumerable: true, writable: true, configurable: true });
};

/**
 * Of the variables a template needs — its declared ones, then those it prints unconditionally
 * (`requiredVariables`) — the ones `variables` lacks, once each, in that order. A send missing any is
 * refused (422 `template_variables_missing`); a preview renders them blank and lists them as warnings.
 */
export function missingVariables(needed: Iterable<string>, variables: Record<string, unknown>): string[] {
  return [...new Set(needed)].filter((name) => !hasVariable(variables, name));
}

const isBlank = (value: string | null): boolean => value === null || value.trim() === '';

/**
 * Liquid with the sandbox settings for templates written by tenants: no prototype access, unknown filters
 * refused, no partials, and limits on parse size and memory (render time is the render pool's). HTML output
 * is escaped by default (authors opt out with `| raw`); subject and text are plain text and are not.
 */
export function createTemplateRenderer(options: TemplateRendererOptions = {}) {
  const common = {
    // An empty in-memory file map: nothing a template names can reach the server's file system.
    templates: {},
    // The `date` filter answers the same on every server, whatever its local time zone.
    timezoneOffset: 0,
    strictFilters: true,
    ownPropertyOnly: true,
    parseLimit: options.parseLimit ?? 1e6,
    // No LiquidJS renderLimit: it counts wall time, which a busy machine would spend before a small
    // template had its turn on a core. Renders run on the render pool's threads, stopped there by CPU time.
    memoryLimit: options.memoryLimit ?? 1e7,
  };
  const htmlEngine = new Liquid({ ...common, outputEscape: 'escape' });
  const plainEngine = new Liquid(common);
  for (const engine of [htmlEngine, plainEngine]) {
    for (const tag of FORBIDDEN_TAGS) delete (engine.tags as Record<string, unknown>)[tag];
  }
  const engineFor = (field: TemplateField) => (field === 'html' ? htmlEngine : plainEngine);

  function parseField(field: TemplateField, source: string): Template[] {
    try {
      return engineFor(field).parse(source);
    } catch (error) {
      if (error instanceof LiquidError) throw templateSyntaxError(field, error.message);
      throw error;
    }
  }

  return {
    /**
     * The variables a template cannot render without, read from the template itself: each variable that a
     * top-level `{{ output }}` prints without a `default` filter (`{{ first_name }}`, `{{ order.id }}`).
     * Ones used only inside a block (`if`, `for`, `case`…) or with a default are optional, since the
     * template decides whether they appear; names the template assigns itself are not variables.
     * Parsing only, on the calling thread, bounded by the parse limit like `check`.
     */
    requiredVariables(content: TemplateContent): string[] {
      const required = new Set<string>();
      for (const field of FIELDS) {
        const source = content[field];
        if (source === null) continue;
        const engine = engineFor(field);
        const parsed = parseField(field, source);
        const globals = new Set(engine.globalVariableSegmentsSync(parsed).map(variablePath));
        for (const template of parsed) {
          if (!(template instanceof Output)) continue;
          if (template.value.filters.some((filter) => filter.name === 'default')) continue;
          for (const segments of engine.globalVariableSegmentsSync([template])) {
            const path = variablePath(segments);
            if (path !== '' && globals.has(path)) required.add(path);
          }
        }
      }
      return [...required];
    },

    /**
     * Checks that a template can be published: it has a body and every field parses. Throws
     * `template_empty` or `template_syntax_error` (with the field as `param`).
     */
    check(content: TemplateContent): void {
      if (isBlank(content.html) && isBlank(content.text)) throw templateEmpty();
      for (const field of FIELDS) {
        const source = content[field];
        if (source !== null) parseField(field, source);
      }
    },

    /**
     * Renders every field with the given variables. Throws `template_empty`, or `template_syntax_error` /
     * `template_render_error` naming the field at fault.
     */
    async render(content: TemplateContent, variables: Record<string, unknown>): Promise<RenderedContent> {
      return (await renderMany(content, [variables]))[0]!;
    },

    /** Renders the content once per set of variables (a broadcast's copies), each field parsed once. */
    renderMany,
  };

  async function renderMany(
    content: TemplateContent,
    variablesList: ReadonlyArray<Record<string, unknown>>,
  ): Promise<RenderedContent[]> {
    if (isBlank(content.html) && isBlank(content.text)) throw templateEmpty();
    const parsed = FIELDS.map((field) => {
      const source = content[field];
      return source === null ? null : parseField(field, source);
    });
    const renderOne = async (field: TemplateField, index: number, variables: Record<string, unknown>) => {
      const templates = parsed[index];
      if (!templates) return null;
      try {
        return String(await engineFor(field).render(templates, variables));
      } catch (error) {
        if (error instanceof LiquidError) throw templateRenderError(field, error.message);
        throw error;
      }
    };
    const results: RenderedContent[] = [];
    for (const variables of variablesList) {
      const subject = await renderOne('subject', 0, variables);
      const html = await renderOne('html', 1, variables);
      let text = await renderOne('text', 2, variables);
      // 78 columns: the line length RFC 5322 recommends for message bodies.
      if (text === null && html !== null) text = htmlToText(html, { wordwrap: 78 });
      results.push({ subject, html, text });
    }
    return results;
  }
}

export type TemplateRenderer = ReturnType<typeof createTemplateRenderer>;

/** `user.name` for the segments of `{{ user.name }}`; a computed or numeric segment ends the path. */
function variablePath(segments: ReadonlyArray<unknown>): string {
  const names: string[] = [];
  for (const segment of segments) {
    if (typeof segment !== 'string') break;
    names.push(segment);
  }
  return names.join('.');
}
