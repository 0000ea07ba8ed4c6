import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { callUnderPath } from '../../http/path-handlers.ts';
import { ListQuery, toPageRequest, listOf } from '../../http/list.ts';
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
import type { SegmentService } from '../segments/segments.service.ts';
import { MAX_TOPIC_CHOICES, TopicChoice } from '../topics/topics.schemas.ts';
import type { TopicService } from '../topics/topics.service.ts';
import { hide, IdParams } from './resend-routing.ts';

/**
 * A contact as Resend's SDK creates it: Postwire's fields, and the segments it goes into and its topic
 * choices (`segments: [{ id }]`, `topics: [{ id, subscription }]`), made in the contact's transaction.
 */
const CreateResendContactBody = Type.Object(
  {
    ...CreateContactBody.properties,
    segments: Type.Optional(
      Type.Array(Type.Object({ id: Type.String({ minLength: 1 }) }, { additionalProperties: false }), {
        maxItems: 100,
      }),
    ),
    topics: Type.Optional(Type.Array(TopicChoice, { maxItems: MAX_TOPIC_CHOICES })),
  },
  { additionalProperties: false },
);

/** A contact in a Resend list (without its properties). */
export const toResendListContact = (contact: ContactView) => ({
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
 * scope (resend.routes.ts), which turns errors into Resend's. Contacts' segments and topics are in
 * resend-segments.ts and resend-topics.ts, imports in resend-contact-imports.ts; contacts through an audience's
 * path answer 501 there.
 */
export function registerResendContactRoutes(
  scope: FastifyInstance,
  {
    contacts,
    contactProperties,
    segments,
    topics,
  }: {
    contacts: ContactService;
    contactProperties: ContactPropertyService;
    segments: SegmentService;
    topics: TopicService;
  },
): void {
  const app = scope.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/contacts',
    {
      config: { permission: 'full_access' },
      schema: { ...hide, body: CreateResendContactBody },
    },
    async (request, reply) => {
      const projectId = projectOf(request);
      const { segments: into = [], topics: choices = [], ...fields } = request.body;
      const plan = await contacts.prepareCreate(projectId, fields);
      return reply.transact(async (transaction) => {
        const contact = await contacts.create(transaction, plan);
        // A segment or topic the project does not have is a 404, and the contact is not created either.
        for (const segment of into) await segments.addContact(transaction, projectId, contact.id, segment.id);
        if (choices.length > 0) await topics.choose(transaction, projectId, contact.id, choices);
        return { object: 'contact', id: contact.id };
      });
    },
  );

  app.get(
    '/contacts',
    { config: { permission: 'read_only' }, schema: { ...hide, querystring: ListQuery } },
    async (request) => {
      const page = await contacts.list(projectOf(request), toPageRequest(request.query, 'con'), {});
      return listOf(page, toResendListContact);
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
      return listOf(page, toResendProperty);
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
    callUnderPath(contactProperties.delete),
  );
}
