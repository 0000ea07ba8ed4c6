import { DomainError } from '../../lib/errors.ts';

// The pieces of a step that are values rather than graph: durations (a delay, a wait's timeout) and condition
// rules (a condition step, a wait's filter), checked on save and evaluated by the runs.

const UNIT_MS: Record<string, number> = {
  s: 1000,
  second: 1000,
  m: 60_000,
  minute: 60_000,
  h: 3_600_000,
  hour: 3_600_000,
  d: 86_400_000,
  day: 86_400_000,
  w: 604_800_000,
  week: 604_800_000,
};
const MAX_WAIT_MS = 365 * 86_400_000;

/**
 * A delay or a timeout in milliseconds: `30 minutes`, `2 days`, `1 week`, `45s`, `3h`, `2d` (a number and a
 * unit: second, minute, hour, day, week, singular or plural, or their first letter), at least a second and at
 * most a year; undefined otherwise.
 */
export function parseWait(text: string): number | undefined {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([a-z]+?)s?\s*$/i.exec(text);
  if (!match) return undefined;
  const unit = UNIT_MS[match[2]!.toLowerCase()];
  if (unit === undefined) return undefined;
  const ms = Math.round(Number(match[1]) * unit);
  return ms >= 1000 && ms <= MAX_WAIT_MS ? ms : undefined;
}

export type Rule =
  { type: 'rule'; field: string; operator: string; value?: unknown } | { type: 'and' | 'or'; rules: Rule[] };

const OPERATORS = [
  'eq',
  'neq',
  'gt',
  'gte',
  'lt',
  'lte',
  'contains',
  'starts_with',
  'ends_with',
  'exists',
  'is_empty',
];
const NUMERIC = ['gt', 'gte', 'lt', 'lte'];
const TEXTUAL = ['contains', 'starts_with', 'ends_with'];
const FIELD = /^((contact|event)\.[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*|email\.(opened|clicked))$/;
const MAX_DEPTH = 5;

const invalid = (param: string, message: string) =>
  new DomainError('validation', 'invalid_automation', message, param);

/** Checks a rule as a step holds it (`name` says which step, for the message). */
export function checkRule(rule: unknown, param: string, name: string, depth = 0): void {
  if (typeof rule !== 'object' || rule === null || Array.isArray(rule)) {
    throw invalid(param, `${name}: a rule must be an object.`);
  }
  const value = rule as Record<string, unknown>;
  if (value.type === 'and' || value.type === 'or') {
    if (!Array.isArray(value.rules) || value.rules.length === 0) {
      throw invalid(`${param}.rules`, `${name}: an '${value.type}' rule needs a non-empty list of rules.`);
    }
    if (depth >= MAX_DEPTH) throw invalid(param, `${name}: rules nest at most ${MAX_DEPTH} deep.`);
    value.rules.forEach((each, index) => checkRule(each, `${param}.rules[${index}]`, name, depth + 1));
    return;
  }
  if (value.type !== 'rule') {
    throw invalid(`${param}.type`, `${name}: a rule's type is 'rule', 'and' or 'or'.`);
  }
  if (typeof value.field !== 'string' || !FIELD.test(value.field)) {
    throw invalid(
      `${param}.field`,
      `${name}: field must be 'contact.<field or property>', 'event.<payload field>', 'email.opened' or 'email.clicked'.`,
    );
  }
  const operator = value.operator;
  if (typeof operator !== 'string' || !OPERATORS.includes(operator)) {
    throw invalid(`${param}.operator`, `${name}: operator must be one of ${OPERATORS.join(', ')}.`);
  }
  const operand = value.value;
  const ok =
    operator === 'exists' || operator === 'is_empty'
      ? operand === undefined
      : NUMERIC.includes(operator)
        ? typeof operand === 'number'
        : TEXTUAL.includes(operator)
          ? typeof operand === 'string'
          : operand === null || ['string', 'number', 'boolean'].includes(typeof operand);
  if (!ok) {
    throw invalid(
      `${param}.value`,
      `${name}: operator '${operator}' ${
        operator === 'exists' || operator === 'is_empty'
          ? 'takes no value'
          : NUMERIC.includes(operator)
            ? 'compares with a number'
            : TEXTUAL.includes(operator)
              ? 'compares with a string'
              : 'compares with a string, number, boolean or null'
      }.`,
    );
  }
}

/** Whether a rule reads a field starting with `prefix`. */
export const readsField = (rule: Rule, prefix: string): boolean =>
  rule.type === 'rule' ? rule.field.startsWith(prefix) : rule.rules.some((each) => readsField(each, prefix));

/** Evaluates a checked rule, each field's value given by `valueOf` (undefined: not there). */
export function evaluateRule(rule: Rule, valueOf: (field: string) => unknown): boolean {
  if (rule.type === 'and') return rule.rules.every((each) => evaluateRule(each, valueOf));
  if (rule.type === 'or') return rule.rules.some((each) => evaluateRule(each, valueOf));
  if (rule.type !== 'rule') return false;
  const actual = valueOf(rule.field);
  const expected = rule.value;
  switch (rule.operator) {
    case 'exists':
      return actual !== undefined && actual !== null;
    case 'is_empty':
      return (
        actual === undefined ||
        actual === null ||
        actual === '' ||
        (Array.isArray(actual) && actual.length === 0)
      );
    case 'eq':
      return (actual ?? null) === expected;
    case 'neq':
      return (actual ?? null) !== expected;
    case 'gt':
      return typeof actual === 'number' && actual > (expected as number);
    case 'gte':
      return typeof actual === 'number' && actual >= (expected as number);
    case 'lt':
      return typeof actual === 'number' && actual < (expected as number);
    case 'lte':
      return typeof actual === 'number' && actual <= (expected as number);
    case 'contains':
      return typeof actual === 'string' && actual.includes(expected as string);
    case 'starts_with':
      return typeof actual === 'string' && actual.startsWith(expected as string);
    case 'ends_with':
      return typeof actual === 'string' && actual.endsWith(expected as string);
    default:
      return false;
  }
}

/** The value at a dotted path of an object (`plan.name`), undefined when it is not there. */
export function valueAt(root: unknown, path: string): unknown {
  let value = root;
  for (const part of path.split('.')) {
    if (typeof value !== 'object' || value === null || !Object.hasOwn(value, part)) return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}
