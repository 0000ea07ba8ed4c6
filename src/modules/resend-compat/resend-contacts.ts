import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { list, ListQuery, toPageRequest } from '../../http/list.ts';
import type { ContactPropertyService } from '../contacts/contact-properties.service.ts';
import {
  type ContactPropertyView,
  type ContactView,
  CreateContactBody,
  CreateContactPropertyBody,
  UpdateContactBody,
  UpdateContactPropertyBody,
} from '../contacts/contacts.schemas.ts';
import type { ContactService } from '../contacts/contacts.service.ts';
import { unsupportedField } from './resend-errors.ts';

const hide = { hide: true } as const;
const IdParams = Type.Object({ id: Type.String({ minLength: 1 }) });

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * A contact as Resend's SDK creates it: Postwire's fields, but for `segments` and `topics`, which Postwire does
 * not have yet: refused (422) when given, rather than dropped.
 */
function toPostwireContact(body: unknown): unknown {
  if (!isObject(body)) return body;
  const { segments, topics, ...rest } = body;
  for (const [param, value] of [
    ['segments', segments],
    ['topics', topics],
  ] as const) {
    if (value !== undefined && value !== null && !(Array.isArray(value) && value.length === 0)) {
      throw unsupportedField(
        param,
        `Postwire does not implement ${param} yet; create the contact without them.`,
      );
    }
  }
  return rest;
}

/** A contact in a Resend list (without its properties). */
const toResendListContact = (contact: ContactView) => ({
  id: contact.id,
  email: contact.email,
  first_name: contact.first_name,
  last_name: contact.last_name,
  unsubscribed: contact.unsubscribed,
  created_at: contact.created_at,
});

/** A contact as Resend's `contacts.get` answers it: each property value with its type. */
export const toResendContact = (contact: ContactView) => ({
  object: 'contact' as const,
  ...toResendListContact(contact),
  properties: Object.fromEntries(
    Object.entries(contact.properties).map(([key, value]) => [key, { type: typeof value, value }]),
  ),
});

/** A contact property as Resend's API answers it (`ApiContactProperty`). */
const toResendProperty = (property: ContactPropertyView) => ({
  id: property.id,
  key: property.key,
  type: property.type,
  fallback_value: property.fallback_value,
  created_at: property.created_at,
});

/**
 * Resend's contacts (global, by id or email) and contact properties over the /v1 services, inside the /resend
 * scope (resend.routes.ts), which turns errors into Resend's. Contacts' segments, topics and imports, and
 * audiences, are not here: they answer 501 there.
 */
export function registerResendContactRoutes(
  scope: FastifyInstance,
  { contacts, contactProperties }: { contacts: ContactService; contactProperties: ContactPropertyService },
): void {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/contacts',
    {
      config: { permission: 'full_access' },
      schema: { ...hide, body: CreateContactBody },
      preValidation: async (request) => {
        request.body = toPostwireContact(request.body) as typeof request.body;
      },
    },
    async (request, reply) => {
      const plan = await contacts.prepareCreate(projectOf(request), request.body);
      return reply.transact(async (transaction) => {
        const contact = await contacts.create(transaction, plan);
        return { object: 'contact', id: contact.id };
      });
    },
  );

  app.get(
    '/contacts',
    { config: { permission: 'read_only' }, schema: { ...hide, querystring: ListQuery } },
    async (request) => {
      const page = await contacts.list(projectOf(request), toPageRequest(request.query, 'con'), {});
      return list(page.items.map(toResendListContact), page.hasMore);
    },
  );

  app.get(
    '/contacts/:id',
    { config: { permission: 'read_only' }, schema: { ...hide, params: IdParams } },
    async (request) => toResendContact(await contacts.get(projectOf(request), request.params.id)),
  );

  app.patch(
    '/contacts/:id',
    { config: { permission: 'full_access' }, schema: { ...hide, params: IdParams, body: UpdateContactBody } },
    async (request, reply) => {
      const plan = await contacts.prepareUpdate(projectOf(request), request.params.id, request.body);
      return reply.transact(async (transaction) => {
        const contact = await contacts.update(transaction, plan);
        return { object: 'contact', id: contact.id };
      });
    },
  );

  app.delete(
    '/contacts/:id',
    { config: { permission: 'full_access' }, schema: { ...hide, params: IdParams } },
    async (request, reply) => {
      const plan = await contacts.prepareDelete(projectOf(request), request.params.id);
      return reply.transact(async (transaction) => {
        const { id } = await contacts.delete(transaction, plan);
        return { object: 'contact', contact: id, deleted: true };
      });
    },
  );

  app.post(
    '/contact-properties',
    { config: { permission: 'full_access' }, schema: { ...hide, body: CreateContactPropertyBody } },
    async (request, reply) => {
      const record = contactProperties.prepareCreate(projectOf(request), request.body);
      return reply.transact(async (transaction) => {
        const property = await contactProperties.create(transaction, record);
        return { object: 'contact_property', id: property.id };
      });
    },
  );

  app.get(
    '/contact-properties',
    { config: { permission: 'read_only' }, schema: { ...hide, querystring: ListQuery } },
    async (request) => {
      const page = await contactProperties.list(projectOf(request), toPageRequest(request.query, 'cprop'));
      return list(page.items.map(toResendProperty), page.hasMore);
    },
  );

  app.get(
    '/contact-properties/:id',
    { config: { permission: 'read_only' }, schema: { ...hide, params: IdParams } },
    async (request) => ({
      object: 'contact_property',
      ...toResendProperty(await contactProperties.get(projectOf(request), request.params.id)),
    }),
  );

  app.patch(
    '/contact-properties/:id',
    {
      config: { permission: 'full_access' },
      schema: { ...hide, params: IdParams, body: UpdateContactPropertyBody },
    },
    async (request) => {
      const property = await contactProperties.update(projectOf(request), request.params.id, request.body);
      return { object: 'contact_property', id: property.id };
    },
  );

  app.delete(
    '/contact-properties/:id',
    { config: { permission: 'full_access' }, schema: { ...hide, params: IdParams } },
    async (request) => contactProperties.delete(projectOf(request), request.params.id),
  );
}
