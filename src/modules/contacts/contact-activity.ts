import { mapPage, type Page, type PageRequest } from '../../db/pagination.ts';
import type { RecipientRepo } from '../emails/recipients.repo.ts';
import type { EventRepo } from '../events/events.repo.ts';
import type { ContactActivityView } from './contacts.schemas.ts';
import type { ContactService } from './contacts.service.ts';

// A contact's activity (issue 37, item 1): the emails sent to its address, newest first, each with what happened
// to it at that address (its recipient's status and events). Read from the emails and events tables, which
// their modules write: the address is what ties them to the contact, so mail sent to it before the contact
// existed, or by a transactional send, is part of its history as much as a broadcast's copy. Its contact.*
// events are GET /v1/events' (they name no email).

export interface ContactActivityDeps {
  contacts: Pick<ContactService, 'find'>;
  recipients: Pick<RecipientRepo, 'ofAddress'>;
  events: Pick<EventRepo, 'forEmails'>;
}

export function createContactActivity({ contacts, recipients, events }: ContactActivityDeps) {
  return {
    /** A page of the emails to the contact's address (by id or email), each with its events there. */
    async list(projectId: string, idOrEmail: string, page: PageRequest): Promise<Page<ContactActivityView>> {
      const contact = await contacts.find(projectId, idOrEmail);
      const emails = await recipients.ofAddress(projectId, contact.email, page);
      const found = await events.forEmails(
        projectId,
        emails.items.map((email) => email.id),
      );
      const byEmail = new Map<string, ContactActivityView['events']>();
      for (const event of found) {
        // An email to several addresses has each recipient's events: only this address's are its history.
        const recipient = (JSON.parse(event.data) as { recipient?: unknown }).recipient;
        if (typeof recipient === 'string' && recipient.toLowerCase() !== contact.email) continue;
        const list = byEmail.get(event.emailId!) ?? [];
        list.push({ id: event.id, type: event.type, created_at: event.createdAt });
        byEmail.set(event.emailId!, list);
      }
      return mapPage(emails, (email) => ({
        object: 'contact_activity' as const,
        id: email.id,
        from: email.from,
        subject: email.subject,
        broadcast_id: email.broadcastId,
        status: email.status,
        created_at: email.createdAt,
        events: byEmail.get(email.id) ?? [],
      }));
    },
  };
}

export type ContactActivity = ReturnType<typeof createContactActivity>;
