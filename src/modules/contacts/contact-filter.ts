import { type Expression, type ExpressionBuilder, type SqlBool, sql } from 'kysely';
import type { Engine } from '../../db/connection.ts';
import { jsonMember, jsonMemberNumber, jsonValue } from '../../db/engine/sql.ts';
import type { Database } from '../../db/schema.ts';
import { invalidParam } from '../../lib/errors.ts';
import type { ContactPropertyRecord, PropertyValue } from './contact-properties.repo.ts';

// A filter over a project's contacts: what a filter segment is (issue 37, item 2). Its conditions name declared
// properties (by key), topics, engagement recency and creation time; `segments` stores it as the API gave it,
// and each evaluation resolves it against what is declared then (keys to the ids contacts' values are stored
// under, topics to their defaults, "the last N days" to a time) into one SQL condition over `contacts`, which
// the segment's members are read with (segments.repo.ts membersAfter, the contacts list). The contacts module
// holds it because it is a condition on contacts: segments (and broadcasts) use it, contacts uses nothing of
// theirs.

export const PROPERTY_OPERATORS = ['equals', 'not_equals', 'greater', 'less', 'exists'] as const;
export type PropertyOperator = (typeof PROPERTY_OPERATORS)[number];
export const CONDITION_TYPES = ['property', 'topic', 'opened', 'clicked', 'created'] as const;
export const MAX_CONDITIONS = 20;
export const MAX_WITHIN_DAYS = 3650;

/** A condition as the API takes and shows it (each `type` uses its own fields). */
export interface FilterCondition {
  type: (typeof CONDITION_TYPES)[number];
  key?: string | undefined;
  operator?: PropertyOperator | undefined;
  value?: PropertyValue | undefined;
  topic_id?: string | undefined;
  subscribed?: boolean | undefined;
  within_days?: number | undefined;
  since?: string | undefined;
}

/** A filter segment's filter: every condition (`all`) or at least one (`any`). */
export interface SegmentFilter {
  match: 'all' | 'any';
  conditions: FilterCondition[];
}

/** A condition resolved for one evaluation. */
type Resolved =
  | {
      kind: 'property';
      operator: PropertyOperator;
      /** Null: the key is no longer declared (no contact has a value). */
      property: ContactPropertyRecord | null;
      value: PropertyValue | undefined;
    }
  | { kind: 'topic'; topicId: string; defaultSubscription: 'opt_in' | 'opt_out'; subscribed: boolean }
  | { kind: 'opened' | 'clicked'; since: string }
  | { kind: 'created'; since: string };

/** A filter resolved for one evaluation: what audienceWhere() turns into SQL. */
export interface AudienceFilter {
  match: 'all' | 'any';
  conditions: Resolved[];
}

const DAY_MS = 86_400_000;

/**
 * Throws the 422 of the first condition that cannot be evaluated, naming it (`filter.conditions[2]`):
 * an undeclared property, a value of the wrong type, a topic the project does not have, a field of another type.
 */
export function checkFilter(
  filter: SegmentFilter,
  declared: readonly ContactPropertyRecord[],
  topicIds: ReadonlySet<string>,
): SegmentFilter {
  if (filter.conditions.length === 0) {
    throw invalidParam('filter.conditions', 'A filter needs at least one condition.', 'filter_invalid');
  }
  const conditions = filter.conditions.map((condition, index) => {
    const param = `filter.conditions[${index}]`;
    const fail = (message: string): never => {
      throw invalidParam(param, `${param}: ${message}`, 'filter_invalid');
    };
    const fields: Record<FilterCondition['type'], Array<keyof FilterCondition>> = {
      property: ['key', 'operator', 'value'],
      topic: ['topic_id', 'subscribed'],
      opened: ['within_days'],
      clicked: ['within_days'],
      created: ['since'],
    };
    const stray = (Object.keys(condition) as Array<keyof FilterCondition>).filter(
      (field) =>
        field !== 'type' && condition[field] !== undefined && !fields[condition.type].includes(field),
    );
    if (stray.length > 0) {
      fail(
        `a ${condition.type} condition takes ${fields[condition.type].join(', ')}, not ${stray.join(', ')}.`,
      );
    }
    switch (condition.type) {
      case 'property': {
        const { key, operator, value } = condition;
        if (key === undefined || operator === undefined)
          return fail('a property condition needs key and operator.');
        const property = declared.find((each) => each.key === key);
        if (!property) return fail(`'${key}' is not a declared contact property.`);
        if (operator === 'exists') {
          if (value !== undefined) fail('exists takes no value.');
          return { type: 'property' as const, key, operator };
        }
        if (value === undefined) return fail(`${operator} needs a value.`);
        if (typeof value !== property.type) {
          fail(
            `'${key}' is a ${property.type} property: ${JSON.stringify(value)} is not a ${property.type}.`,
          );
        }
        if ((operator === 'greater' || operator === 'less') && property.type !== 'number') {
          fail(`${operator} compares numbers: '${key}' is a string property.`);
        }
        return { type: 'property' as const, key, operator, value };
      }
      case 'topic': {
        const { topic_id: topicId, subscribed } = condition;
        if (topicId === undefined || subscribed === undefined) {
          return fail('a topic condition needs topic_id and subscribed.');
        }
        if (!topicIds.has(topicId)) fail(`No topic with id '${topicId}'.`);
        return { type: 'topic' as const, topic_id: topicId, subscribed };
      }
      case 'opened':
      case 'clicked': {
        const days = condition.within_days;
        if (days === undefined) return fail(`an ${condition.type} condition needs within_days.`);
        if (!Number.isInteger(days) || days < 1 || days > MAX_WITHIN_DAYS) {
          fail(`within_days is a whole number of days from 1 to ${MAX_WITHIN_DAYS}.`);
        }
        return { type: condition.type, within_days: days };
      }
      case 'created': {
        const since = condition.since === undefined ? Number.NaN : Date.parse(condition.since);
        if (!Number.isFinite(since)) return fail('a created condition needs since, a date-time (ISO 8601).');
        return { type: 'created' as const, since: new Date(since).toISOString() };
      }
    }
  });
  return { match: filter.match, conditions };
}

/**
 * The filter resolved for an evaluation at `asOf`: keys against the properties declared now (one deleted
 * since matches as no contact's value would), topics against their defaults (one deleted since: nobody is
 * subscribed), "the last N days" from `asOf`.
 */
export async function resolveFilter(
  filter: SegmentFilter,
  declared: readonly ContactPropertyRecord[],
  topicDefault: (topicId: string) => Promise<'opt_in' | 'opt_out' | undefined>,
  asOf: Date,
): Promise<AudienceFilter> {
  const conditions: Resolved[] = [];
  for (const condition of filter.conditions) {
    switch (condition.type) {
      case 'property': {
        const property = declared.find((each) => each.key === condition.key) ?? null;
        const typed =
          property !== null && (condition.value === undefined || typeof condition.value === property.type);
        conditions.push({
          kind: 'property',
          operator: condition.operator!,
          property: typed ? property : null,
          value: condition.value,
        });
        break;
      }
      case 'topic':
        conditions.push({
          kind: 'topic',
          topicId: condition.topic_id!,
          defaultSubscription: (await topicDefault(condition.topic_id!)) ?? 'opt_out',
          subscribed: condition.subscribed!,
        });
        break;
      case 'opened':
      case 'clicked':
        conditions.push({
          kind: condition.type,
          since: new Date(asOf.getTime() - condition.within_days! * DAY_MS).toISOString(),
        });
        break;
      case 'created':
        conditions.push({ kind: 'created', since: condition.since! });
        break;
    }
  }
  return { match: filter.match, conditions };
}

type ContactsBuilder = ExpressionBuilder<Database, 'contacts'>;

/**
 * Subscribed to the topic: by the contact's own choice, or without one when its default is opt-in. Only the
 * choices against the default are looked up (contact_topics_topic).
 */
export function subscribedTo(
  eb: ContactsBuilder,
  topicId: string,
  defaultSubscription: 'opt_in' | 'opt_out',
): Expression<SqlBool> {
  const choice = eb
    .selectFrom('contact_topics')
    .select('contact_topics.contact_id')
    .whereRef('contact_topics.contact_id', '=', 'contacts.id')
    .where('contact_topics.topic_id', '=', topicId);
  return defaultSubscription === 'opt_in'
    ? eb.not(eb.exists(choice.where('contact_topics.subscription', '=', 'opt_out')))
    : eb.exists(choice.where('contact_topics.subscription', '=', 'opt_in'));
}

/** A property condition: the contact's own value, or the property's fallback (what a copy would show). */
function propertyCondition(
  eb: ContactsBuilder,
  engine: Engine,
  condition: Extract<Resolved, { kind: 'property' }>,
): Expression<SqlBool> {
  const { property, operator, value } = condition;
  if (property === null) return operator === 'not_equals' ? sql<SqlBool>`1 = 1` : sql<SqlBool>`1 = 0`;
  if (operator === 'exists')
    return eb(jsonMember(engine, 'contacts.properties', property.id), 'is not', null);
  const fallback = property.fallbackValue;
  if (operator === 'equals' || operator === 'not_equals') {
    const effective = eb.fn.coalesce(
      jsonMember(engine, 'contacts.properties', property.id),
      jsonValue(engine, fallback === null ? null : JSON.stringify(fallback)),
    );
    // Without a value or a fallback a contact equals nothing, so is "not equal" to anything.
    const equal = eb.fn.coalesce(
      eb(effective, '=', jsonValue(engine, JSON.stringify(value))),
      sql.lit(false),
    );
    return operator === 'equals' ? equal : eb.not(equal);
  }
  const number = eb.fn.coalesce(
    jsonMemberNumber(engine, 'contacts.properties', property.id),
    sql.val(typeof fallback === 'number' ? fallback : null),
  );
  return eb(number, operator === 'greater' ? '>' : '<', value as number);
}

/** Some mail to the contact's address was opened (or clicked) at `since` or later. */
function engagedSince(eb: ContactsBuilder, what: 'opened' | 'clicked', since: string): Expression<SqlBool> {
  const column =
    what === 'opened' ? 'recipient_engagement.last_opened_at' : 'recipient_engagement.last_clicked_at';
  return eb.exists(
    eb
      .selectFrom('email_recipients')
      .innerJoin('recipient_engagement', 'recipient_engagement.recipient_id', 'email_recipients.id')
      .select('email_recipients.id')
      .whereRef('email_recipients.project_id', '=', 'contacts.project_id')
      // The expression of the index email_recipients_address_project (migration 0049), compared with an
      // expression: against the bare column SQLite would give the comparison the column's text affinity and
      // leave that part of the index unused (contacts' emails are lowercased already).
      .where(sql`lower(email_recipients.address)`, '=', sql`lower(contacts.email)`)
      .where(column, '>=', since),
  );
}

/** The filter as one condition on `contacts`. */
export function audienceWhere(engine: Engine, filter: AudienceFilter) {
  return (eb: ContactsBuilder): Expression<SqlBool> => {
    const parts = filter.conditions.map((condition): Expression<SqlBool> => {
      switch (condition.kind) {
        case 'property':
          return propertyCondition(eb, engine, condition);
        case 'topic': {
          const subscribed = subscribedTo(eb, condition.topicId, condition.defaultSubscription);
          return condition.subscribed ? subscribed : eb.not(subscribed);
        }
        case 'opened':
        case 'clicked':
          return engagedSince(eb, condition.kind, condition.since);
        case 'created':
          return eb('contacts.created_at', '>=', condition.since);
      }
    });
    return filter.match === 'all' ? eb.and(parts) : eb.or(parts);
  };
}
