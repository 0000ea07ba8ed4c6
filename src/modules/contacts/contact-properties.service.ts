import { mapPage, type PageRequest } from '../../db/pagination.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { Clock } from '../../lib/clock.ts';
import { conflict, DomainError, invalidParam, notFound } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import type {
  ContactPropertyRecord,
  ContactPropertyRepo,
  PropertyType,
  PropertyValue,
} from './contact-properties.repo.ts';
import {
  type ContactPropertyView,
  type CreateContactPropertyInput,
  MAX_CONTACT_PROPERTIES,
  PROPERTY_KEY_PATTERN,
  type UpdateContactPropertyInput,
} from './contacts.schemas.ts';

const keyShape = new RegExp(PROPERTY_KEY_PATTERN);

export const toContactPropertyView = (record: ContactPropertyRecord): ContactPropertyView => ({
  object: 'contact_property',
  id: record.id,
  key: record.key,
  type: record.type,
  fallback_value: record.fallbackValue,
  created_at: record.createdAt,
  updated_at: record.updatedAt,
});

const typeName = (value: unknown): string => (typeof value === 'number' ? 'a number' : `a ${typeof value}`);

/** The one rule of a property's values: of its declared type (a number is finite; JSON has no other). */
function checkValue(param: string, key: string, type: PropertyType, value: unknown): PropertyValue {
  if (typeof value !== type) {
    throw invalidParam(
      param,
      `'${key}' is declared as a ${type} property: ${param} must be a ${type}, not ${value === null ? 'null' : typeName(value)}.`,
      'property_type_mismatch',
    );
  }
  return value as PropertyValue;
}

/**
 * Values sent for a contact (`{ key: value | null }`) checked against the project's declared properties:
 * each key declared, each value of its type. Answers them by property id (null: remove the value).
 */
export function checkPropertyValues(
  declared: readonly ContactPropertyRecord[],
  values: Record<string, PropertyValue | null>,
): Map<string, PropertyValue | null> {
  const byKey = new Map(declared.map((property) => [property.key, property]));
  const checked = new Map<string, PropertyValue | null>();
  for (const [key, value] of Object.entries(values)) {
    const property = byKey.get(key);
    const param = `properties.${key}`;
    if (!property) {
      throw invalidParam(
        param,
        `'${key}' is not a declared contact property; declare it first (POST /v1/contact-properties). Declared: ${declared.map((each) => each.key).join(', ') || 'none'}.`,
        'property_undeclared',
      );
    }
    checked.set(property.id, value === null ? null : checkValue(param, key, property.type, value));
  }
  return checked;
}

/** A property filter's `key:value`, the value read as the property's type. */
export function parsePropertyFilter(
  declared: readonly ContactPropertyRecord[],
  filter: string,
): { id: string; value: PropertyValue } {
  const colon = filter.indexOf(':');
  const key = filter.slice(0, colon);
  const text = filter.slice(colon + 1);
  const property = declared.find((each) => each.key === key);
  if (!property) {
    throw invalidParam('property', `'${key}' is not a declared contact property.`, 'property_undeclared');
  }
  if (property.type === 'string') return { id: property.id, value: text };
  const value = text.trim() === '' ? Number.NaN : Number(text);
  if (!Number.isFinite(value)) {
    throw invalidParam(
      'property',
      `'${key}' is a number property: '${text}' is not a number.`,
      'property_type_mismatch',
    );
  }
  return { id: property.id, value };
}

/** The properties a project declares for its contacts: key, type, fallback. */
export function createContactPropertyService({ repo, clock }: { repo: ContactPropertyRepo; clock: Clock }) {
  async function load(projectId: string, idOrKey: string): Promise<ContactPropertyRecord> {
    let record: ContactPropertyRecord | undefined;
    if (isId('cprop', idOrKey)) record = await repo.find(projectId, 'id', idOrKey);
    else if (keyShape.test(idOrKey)) record = await repo.find(projectId, 'key', idOrKey);
    if (!record) throw notFound('contact property', idOrKey);
    return record;
  }

  const checkFallback = (key: string, type: PropertyType, value: PropertyValue | null | undefined) =>
    value === null || value === undefined ? null : checkValue('fallback_value', key, type, value);

  return {
    /** Every property of the project, to check or show contacts' values with. */
    declared: (projectId: string) => repo.all(projectId),

    prepareCreate(projectId: string, input: CreateContactPropertyInput): ContactPropertyRecord {
      const now = clock.now().toISOString();
      return {
        id: newId('cprop'),
        projectId,
        key: input.key,
        type: input.type,
        fallbackValue: checkFallback(input.key, input.type, input.fallback_value),
        createdAt: now,
        updatedAt: now,
      };
    },

    async create(transaction: Transaction, record: ContactPropertyRecord): Promise<ContactPropertyView> {
      if ((await repo.count(record.projectId, transaction)) >= MAX_CONTACT_PROPERTIES) {
        throw new DomainError(
          'validation',
          'too_many_properties',
          `A project declares at most ${MAX_CONTACT_PROPERTIES} contact properties; delete one first.`,
          'key',
        );
      }
      if (!(await repo.insert(record, transaction))) {
        throw conflict(
          'property_exists',
          `The project already has a contact property '${record.key}'.`,
          'key',
        );
      }
      return toContactPropertyView(record);
    },

    async get(projectId: string, idOrKey: string): Promise<ContactPropertyView> {
      return toContactPropertyView(await load(projectId, idOrKey));
    },

    async list(projectId: string, page: PageRequest) {
      return mapPage(await repo.list(projectId, page), toContactPropertyView);
    },

    async update(
      projectId: string,
      idOrKey: string,
      input: UpdateContactPropertyInput,
    ): Promise<ContactPropertyView> {
      const current = await load(projectId, idOrKey);
      const next: ContactPropertyRecord = {
        ...current,
        fallbackValue: checkFallback(current.key, current.type, input.fallback_value),
        updatedAt: clock.now().toISOString(),
      };
      if (!(await repo.update(next))) throw notFound('contact property', idOrKey);
      return toContactPropertyView(next);
    },

    async delete(
      projectId: string,
      idOrKey: string,
    ): Promise<{ object: 'contact_property'; id: string; deleted: true }> {
      const { id } = await load(projectId, idOrKey);
      if (!(await repo.delete(projectId, id))) throw notFound('contact property', idOrKey);
      return { object: 'contact_property', id, deleted: true };
    },
  };
}

export type ContactPropertyService = ReturnType<typeof createContactPropertyService>;
