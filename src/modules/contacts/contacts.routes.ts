import { Readable } from 'node:stream';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { callUnderPath, callUnderPathWith, listUnderPath } from '../../http/path-handlers.ts';
import { routeOptions } from '../../http/route-options.ts';
import { errorResponses } from '../../http/error-schema.ts';
import { binary } from '../../http/schema-helpers.ts';
import { list, ListQuery, toPageRequest } from '../../http/list.ts';
import type { ContactPropertyService } from './contact-properties.service.ts';
import type { ContactActivity } from './contact-activity.ts';
import {
  Contact,
  ContactActivityList,
  ContactList,
  ContactExportQuery,
  ContactListQuery,
  ContactParams,
  ContactProperty,
  ContactPropertyList,
  ContactPropertyParams,
  CreateContactBody,
  CreateContactPropertyBody,
  DeletedContact,
  DeletedContactProperty,
  UpdateContactBody,
  UpdateContactPropertyBody,
} from './contacts.schemas.ts';
import type { ContactService } from './contacts.service.ts';

// Contacts are the audience's data, not sending: writes need a full_access key (a sending_access key, made to be
// handed to an application that sends, cannot read or change the address book); read_only keys read.
export function registerContactRoutes(
  server: FastifyInstance,
  {
    contacts,
    contactProperties,
    activity,
  }: { contacts: ContactService; contactProperties: ContactPropertyService; activity: ContactActivity },
): void {
  const app = server.withTypeProvider<TypeBoxTypeProvider>();
  const routes = routeOptions(['Contacts']);

  app.post(
    '/v1/contacts',
    routes.fullAccess({
      operationId: 'createContact',
      summary: 'Create a contact',
      description: 'Emits `contact.created`. An address the project already has (in any case) is a 409.',
      body: CreateContactBody,
      response: { 201: Contact, ...errorResponses(409) },
    }),
    async (request, reply) => {
      const plan = await contacts.prepareCreate(projectOf(request), request.body);
      reply.code(201);
      return reply.transact((transaction) => contacts.create(transaction, plan));
    },
  );

  app.get(
    '/v1/contacts/:id/activity',
    routes.readOnly({
      operationId: 'listContactActivity',
      summary: 'List a contact’s activity, newest first',
      description:
        'The emails sent to the contact’s address (transactional sends and broadcast copies alike, from before the contact existed too), each with its status and events at that address.',
      params: ContactParams,
      querystring: ListQuery,
      response: { 200: ContactActivityList, ...errorResponses() },
    }),
    listUnderPath('msg', activity.list),
  );

  app.get(
    '/v1/contacts',
    routes.readOnly({
      operationId: 'listContacts',
      summary: 'List contacts, newest first',
      description: 'The project’s contacts, newest first, optionally filtered (the filters combine).',
      querystring: ContactListQuery,
      response: { 200: ContactList, ...errorResponses() },
    }),
    async (request) => {
      const { limit, after, before, ...filter } = request.query;
      const page = await contacts.list(
        projectOf(request),
        toPageRequest({ limit, after, before }, 'con'),
        filter,
      );
      return list(page.items, page.hasMore);
    },
  );

  app.get(
    '/v1/contacts/export',
    routes.readOnly({
      operationId: 'exportContacts',
      summary: 'Export contacts as CSV',
      description:
        'The project’s contacts (optionally filtered as the list is), oldest first, as `text/csv`: `email`, `first_name`, `last_name`, `unsubscribed`, a column per declared property (by key), `id`, `created_at`, `updated_at`. Streamed as it is read; imports back without a column map.',
      querystring: ContactExportQuery,
      response: {
        200: binary('text/csv', 'The CSV.'),
        ...errorResponses(),
      },
    }),
    async (request, reply) => {
      const lines = await contacts.export(projectOf(request), request.query);
      return reply
        .type('text/csv; charset=utf-8')
        .header('content-disposition', 'attachment; filename="contacts.csv"')
        .send(Readable.from(lines));
    },
  );

  app.get(
    '/v1/contacts/:id',
    routes.readOnly({
      operationId: 'getContact',
      summary: 'Retrieve a contact by id or email',
      params: ContactParams,
      response: { 200: Contact, ...errorResponses() },
    }),
    callUnderPath(contacts.get),
  );

  app.patch(
    '/v1/contacts/:id',
    routes.fullAccess({
      operationId: 'updateContact',
      summary: 'Update a contact by id or email',
      description:
        'Only the fields sent change (and, in `properties`, only the keys sent). Emits `contact.updated`.',
      params: ContactParams,
      body: UpdateContactBody,
      response: { 200: Contact, ...errorResponses() },
    }),
    async (request, reply) => {
      const plan = await contacts.prepareUpdate(projectOf(request), request.params.id, request.body);
      return reply.transact((transaction) => contacts.update(transaction, plan));
    },
  );

  app.delete(
    '/v1/contacts/:id',
    routes.fullAccess({
      operationId: 'deleteContact',
      summary: 'Delete a contact by id or email',
      description: 'Emits `contact.deleted` with the contact as it was.',
      params: ContactParams,
      response: { 200: DeletedContact, ...errorResponses() },
    }),
    async (request, reply) => {
      const plan = await contacts.prepareDelete(projectOf(request), request.params.id);
      return reply.transact((transaction) => contacts.delete(transaction, plan));
    },
  );

  const propertyRoutes = routeOptions(['Contact properties']);

  app.post(
    '/v1/contact-properties',
    propertyRoutes.fullAccess({
      operationId: 'createContactProperty',
      summary: 'Declare a contact property',
      description:
        'A key contacts may have a value for, its type and an optional fallback. A key the project has is a 409.',
      body: CreateContactPropertyBody,
      response: { 201: ContactProperty, ...errorResponses(409) },
    }),
    async (request, reply) => {
      const record = contactProperties.prepareCreate(projectOf(request), request.body);
      reply.code(201);
      return reply.transact((transaction) => contactProperties.create(transaction, record));
    },
  );

  app.get(
    '/v1/contact-properties',
    propertyRoutes.readOnly({
      operationId: 'listContactProperties',
      summary: 'List contact properties, newest first',
      querystring: ListQuery,
      response: { 200: ContactPropertyList, ...errorResponses() },
    }),
    async (request) => {
      const page = await contactProperties.list(projectOf(request), toPageRequest(request.query, 'cprop'));
      return list(page.items, page.hasMore);
    },
  );

  app.get(
    '/v1/contact-properties/:id',
    propertyRoutes.readOnly({
      operationId: 'getContactProperty',
      summary: 'Retrieve a contact property by id or key',
      params: ContactPropertyParams,
      response: { 200: ContactProperty, ...errorResponses() },
    }),
    callUnderPath(contactProperties.get),
  );

  app.patch(
    '/v1/contact-properties/:id',
    propertyRoutes.fullAccess({
      operationId: 'updateContactProperty',
      summary: 'Change a contact property’s fallback',
      description: 'The key and the type stay as declared; only the fallback changes.',
      params: ContactPropertyParams,
      body: UpdateContactPropertyBody,
      response: { 200: ContactProperty, ...errorResponses() },
    }),
    callUnderPathWith('body', contactProperties.update),
  );

  app.delete(
    '/v1/contact-properties/:id',
    propertyRoutes.fullAccess({
      operationId: 'deleteContactProperty',
      summary: 'Delete a contact property',
      description:
        'Contacts’ values of it are no longer shown, filtered on or sent; declaring the key again starts without them.',
      params: ContactPropertyParams,
      response: { 200: DeletedContactProperty, ...errorResponses() },
    }),
    callUnderPath(contactProperties.delete),
  );
}
