// The building blocks of the configuration schema (src/config.ts): each setting carries its environment
// name, its default, how it is read and what it means, so that reading, checking and documenting it are one
// definition. The schema's shape is the shape of the configuration it produces.
import { parseDuration, parseSchedule } from './duration.ts';

export type Env = Record<string, string | undefined>;

export interface ReadContext {
  env: Env;
  /** Every problem found is collected, so that one start names them all. */
  problems: string[];
  /** Picks defaults that depend on where the process runs (the log format). */
  stdoutIsTTY: boolean;
}

interface Described {
  /** One line: what the setting does (the CLI's usage and the reference's table). */
  description: string;
  /** More for the reference: limits, interactions, when to change it. */
  details?: string;
}

/** A setting read from the environment. */
export interface Setting<T> extends Described {
  readonly kind: 'setting';
  /** The environment variables it reads: one, or a few that only make sense together (DKIM_*). */
  readonly env: readonly string[];
  /** The default as a person reads it; `code` spans in backticks. */
  readonly shownDefault: string;
  /** Its heading in the reference; given by `section`. */
  group: string;
  read(context: ReadContext): T;
}

/**
 * A value fixed in code rather than read from the environment: part of the configuration so that it has one
 * definition, and so that tests and benchmarks can change it like any other.
 */
export interface Fixed<T> {
  readonly kind: 'fixed';
  readonly value: T;
  readonly description: string;
}

export type Schema = { readonly [key: string]: Setting<unknown> | Fixed<unknown> | Schema };

/** The configuration a schema produces. */
export type ValuesOf<S> = {
  -readonly [K in keyof S]: S[K] extends Setting<infer T>
    ? T
    : S[K] extends Fixed<infer T>
      ? T
      : ValuesOf<S[K]>;
};

const isLeaf = (node: Schema[string]): node is Setting<unknown> | Fixed<unknown> =>
  'kind' in node && (node.kind === 'setting' || node.kind === 'fixed');

export function readSchema<S extends Schema>(schema: S, context: ReadContext): ValuesOf<S> {
  const values: Record<string, unknown> = {};
  for (const [key, node] of Object.entries(schema)) {
    if (!isLeaf(node)) values[key] = readSchema(node, context);
    else values[key] = node.kind === 'fixed' ? structuredClone(node.value) : node.read(context);
  }
  return values as ValuesOf<S>;
}

/** Every setting of a schema, in its order. */
export function settingsOf(schema: Schema): Setting<unknown>[] {
  return Object.values(schema).flatMap((node) =>
    !isLeaf(node) ? settingsOf(node) : node.kind === 'setting' ? [node] : [],
  );
}

/** Puts every setting in the schema under one heading of the reference. */
export function section<S extends Schema>(group: string, schema: S): S {
  for (const setting of settingsOf(schema)) setting.group = group;
  return schema;
}

export const fixed = <T>(value: T, description: string): Fixed<T> => ({ kind: 'fixed', value, description });

/**
 * A setting with its own reading rule. `read` sees the whole environment (a setting may depend on another's
 * value, as SENDER_DOMAINS's default depends on MAIL_TRANSPORT) and reports problems itself.
 */
export function custom<T>(
  env: string | readonly string[],
  options: Described & { default: string; read(context: ReadContext): T },
): Setting<T> {
  const { default: shownDefault, read, ...described } = options;
  return {
    kind: 'setting',
    env: typeof env === 'string' ? [env] : env,
    shownDefault,
    group: '',
    ...described,
    read,
  };
}

/** The raw value, or undefined when the variable is unset or empty (both mean "the default"). */
export const rawValue = (context: ReadContext, name: string): string | undefined => {
  const raw = context.env[name];
  return raw === undefined || raw === '' ? undefined : raw;
};

const code = (value: string | number | boolean) => `\`${value}\``;

export function integer(
  env: string,
  options: Described & { default: number; min: number; max: number; shownDefault?: string },
): Setting<number> {
  const { default: fallback, min, max, shownDefault, ...described } = options;
  return custom(env, {
    ...described,
    default: shownDefault ?? code(fallback),
    read: (context) => readInteger(context, env, min, max) ?? fallback,
  });
}

/** Reads an integer from `min` to `max`; unset gives undefined, and so does a bad value, a problem. */
export function readInteger(context: ReadContext, env: string, min: number, max: number): number | undefined {
  const raw = rawValue(context, env);
  if (raw === undefined) return undefined;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    context.problems.push(`${env} must be an integer from ${min} to ${max}, got '${raw}'.`);
    return undefined;
  }
  return value;
}

export function boolean(env: string, options: Described & { default: boolean }): Setting<boolean> {
  const { default: fallback, ...described } = options;
  return custom(env, {
    ...described,
    default: code(fallback),
    read(context) {
      const raw = rawValue(context, env)?.toLowerCase();
      if (raw === undefined) return fallback;
      if (['true', '1', 'yes'].includes(raw)) return true;
      if (['false', '0', 'no'].includes(raw)) return false;
      context.problems.push(`${env} must be true or false, got '${context.env[env]}'.`);
      return fallback;
    },
  });
}

export function fraction(env: string, options: Described & { default: number }): Setting<number> {
  const { default: fallback, ...described } = options;
  return custom(env, {
    ...described,
    default: code(fallback),
    read(context) {
      const raw = rawValue(context, env);
      if (raw === undefined) return fallback;
      const value = Number(raw);
      if (!Number.isFinite(value) || value < 0 || value > 1) {
        context.problems.push(`${env} must be a number from 0 to 1, got '${raw}'.`);
        return fallback;
      }
      return value;
    },
  });
}

/** Reads `500ms`, `5s`, `5m`, `2h`, `1d` or bare milliseconds; a malformed value is a problem and gives undefined. */
export function readDuration(context: ReadContext, env: string): number | undefined {
  const raw = rawValue(context, env);
  if (raw === undefined) return undefined;
  const value = parseDuration(raw);
  if (value === undefined) {
    context.problems.push(`${env} must be a duration such as 500ms, 5s, 5m or 2h, got '${raw}'.`);
  }
  return value;
}

/**
 * A duration in milliseconds. Its default and bounds are written as durations (`60s`, `100ms`, `1h`): as the
 * reference shows them and as the messages name them.
 */
export function duration(
  env: string,
  options: Described & { default: string; min?: string; max?: string },
): Setting<number> {
  const { default: shown, min, max, ...described } = options;
  const fallback = mustParse(shown);
  const minMs = min === undefined ? -Infinity : mustParse(min);
  const maxMs = max === undefined ? Infinity : mustParse(max);
  return custom(env, {
    ...described,
    default: code(shown),
    read(context) {
      const value = readDuration(context, env);
      if (value === undefined) return fallback;
      if (value >= minMs && value <= maxMs) return value;
      context.problems.push(
        min === undefined
          ? `${env} must be at most ${maxMs}ms, got '${context.env[env]}'.`
          : `${env} must be from ${min} to ${max}, got '${context.env[env]}'.`,
      );
      return fallback;
    },
  });
}

/**
 * Delays before each attempt, comma-separated durations (`0,5s,5m`). The first must be 0: the first attempt is
 * made when the work is stored, so a later first step would silently not apply.
 */
export function schedule(env: string, options: Described & { default: string }): Setting<number[]> {
  const { default: shown, ...described } = options;
  const fallback = parseSchedule(shown)!;
  return custom(env, {
    ...described,
    default: code(shown),
    read(context) {
      const raw = rawValue(context, env) ?? shown;
      const steps = parseSchedule(raw);
      if (!steps || steps.length > 50) {
        context.problems.push(
          `${env} must be 1 to 50 comma-separated durations such as 0,5s,5m,2h, got '${raw}'.`,
        );
        return [...fallback];
      }
      if (steps[0] !== 0) {
        context.problems.push(`${env} must start with 0 (the first attempt is made at once), got '${raw}'.`);
        return [...fallback];
      }
      return steps;
    },
  });
}

/** Free text; undefined when unset, unless there is a default. */
export function text(env: string, options: Described & { shownDefault: string }): Setting<string | undefined>;
export function text(env: string, options: Described & { default: string }): Setting<string>;
export function text(
  env: string,
  options: Described & { default?: string; shownDefault?: string },
): Setting<string | undefined> {
  const { default: fallback, shownDefault, ...described } = options;
  return custom(env, {
    ...described,
    default: shownDefault ?? code(fallback!),
    read: (context) => rawValue(context, env) ?? fallback,
  });
}

function mustParse(value: string): number {
  const ms = parseDuration(value);
  if (ms === undefined) throw new Error(`not a duration: '${value}'`);
  return ms;
}

/** The names a setting reads, as one label: `DKIM_DOMAIN, DKIM_SELECTOR, DKIM_PRIVATE_KEY`. */
export const settingLabel = (setting: Setting<unknown>): string => setting.env.join(', ');

/** The settings by heading, in the schema's order. */
export function settingsByGroup(schema: Schema): Map<string, Setting<unknown>[]> {
  const groups = new Map<string, Setting<unknown>[]>();
  for (const setting of settingsOf(schema)) {
    groups.set(setting.group, [...(groups.get(setting.group) ?? []), setting]);
  }
  return groups;
}

/** The settings part of a command's usage: each setting's names, one-line description and default. */
export function usageOfSettings(schema: Schema, width = 110): string {
  const plain = (text: string) => text.replaceAll('`', '');
  const nameWidth = 36;
  const lines: string[] = [];
  for (const [group, settings] of settingsByGroup(schema)) {
    if (lines.length > 0) lines.push('');
    lines.push(`${group}:`);
    for (const setting of settings) {
      const label = settingLabel(setting);
      const fallback = setting.shownDefault === 'unset' ? '' : ` (default: ${plain(setting.shownDefault)})`;
      const words = `${plain(setting.description)}${fallback}`.split(' ');
      const body: string[] = [];
      for (const word of words) {
        const last = body.at(-1);
        if (last !== undefined && nameWidth + 2 + last.length + 1 + word.length <= width) {
          body[body.length - 1] = `${last} ${word}`;
        } else body.push(word);
      }
      const indent = ' '.repeat(nameWidth + 2);
      if (label.length > nameWidth) lines.push(`  ${label}`, ...body.map((line) => `${indent}${line}`));
      else {
        lines.push(
          `  ${label.padEnd(nameWidth)}${body[0]}`,
          ...body.slice(1).map((line) => `${indent}${line}`),
        );
      }
    }
  }
  return `${lines.join('\n')}\n`;
}
