import { formatAddress } from '../../lib/addresses.ts';
import { DomainError, invalidParam } from '../../lib/errors.ts';
import type { ContactPropertyRepo } from '../contacts/contact-properties.repo.ts';
import type { ContactRecord } from '../contacts/contacts.repo.ts';
import type { ContactService } from '../contacts/contacts.service.ts';
import type { EmailService, KeySender, SendPlan } from '../emails/emails.service.ts';
import { parseList } from '../emails/send-checks.ts';
import type { TemplateRenderer } from '../templates/render.ts';
import type { TemplateRepo } from '../templates/templates.repo.ts';
import { broadcastContent, personalizedCopies } from './broadcast-copy.ts';
import type {
  BroadcastPreviewView,
  BroadcastTestView,
  TestBroadcastInput,
} from './broadcast-tests.schemas.ts';
import type { BroadcastRecord } from './broadcasts.repo.ts';
import type { BroadcastService } from './broadcasts.service.ts';

// A broadcast's copy as one contact would get it, before it is sent (issue 37, item 8): shown (preview) or
// mailed to one address (a test). Both make the copy with the fan-out's own code (broadcast-copy.ts).
//
// The per-contact links: a copy's unsubscribe URL is made per recipient when it is sent, and its preference
// link at fan-out. A preview leaves both as the placeholders `{{ unsubscribe_url }}` and `{{ preferences_url }}`:
// a read_only key can preview, and a working preference link would let it change the contact's topics. A
// test is an ordinary email to the address given: its unsubscribe link and List-Unsubscribe headers are that
// address's own (a click suppresses the test address, never the contact), and its preference link stays the
// placeholder, for the same reason (a sending_access key can send a test, and cannot change contacts).

/** What stands for a contact's preference page URL in a preview or a test. */
export const PREFERENCES_PLACEHOLDER = '{{ preferences_url }}';

/** The tag a test email carries (its value: the broadcast's id); the subject starts with TEST_PREFIX. */
export const TEST_TAG = 'broadcast_test';
export const TEST_PREFIX = '[Test] ';

export interface BroadcastTestsDeps {
  broadcasts: Pick<BroadcastService, 'find'>;
  contacts: Pick<ContactService, 'find'>;
  properties: Pick<ContactPropertyRepo, 'all'>;
  templates: Pick<TemplateRepo, 'find' | 'findVersion'>;
  renderer: Pick<TemplateRenderer, 'renderMany'>;
  emails: Pick<EmailService, 'prepareSend'>;
}

const isNotFound = (error: unknown) => error instanceof DomainError && error.kind === 'not_found';

export function createBroadcastTests(deps: BroadcastTestsDeps) {
  /** The contact a request names (404 naming `contact` when the project has none such). */
  async function contactOf(projectId: string, ref: string): Promise<ContactRecord> {
    try {
      return await deps.contacts.find(projectId, ref);
    } catch (error) {
      if (isNotFound(error)) {
        throw new DomainError('not_found', 'resource_missing', `No contact '${ref}'.`, 'contact');
      }
      throw error;
    }
  }

  /** The copy `contact` would get: subject, html and text, its per-contact links left as placeholders. */
  async function copyFor(broadcast: BroadcastRecord, contact: ContactRecord) {
    const made = await broadcastContent(deps.templates, broadcast);
    if (!made) {
      throw invalidParam(
        'template.id',
        `Template '${broadcast.templateId}' has no published version; publish it first.`,
        'template_not_published',
      );
    }
    const declared = await deps.properties.all(broadcast.projectId);
    const [copy] = await personalizedCopies(deps.renderer, broadcast, made.content, [contact], declared, [
      PREFERENCES_PLACEHOLDER,
    ]);
    return copy!;
  }

  return {
    async preview(projectId: string, id: string, ref: string): Promise<BroadcastPreviewView> {
      const broadcast = await deps.broadcasts.find(projectId, id);
      const contact = await contactOf(projectId, ref);
      const copy = await copyFor(broadcast, contact);
      return {
        object: 'broadcast_preview',
        broadcast_id: broadcast.id,
        contact_id: contact.id,
        to: contact.email,
        from: broadcast.from,
        reply_to: broadcast.replyTo,
        subject: copy.subject,
        html: copy.html,
        text: copy.text,
      };
    },

    /**
     * A test of the broadcast to one address, checked and rendered before its transaction: an ordinary email
     * (no `broadcast_id`, so the broadcast's counts never include it) from the broadcast's From, held to the
     * same rules as any send by the key (a domain-limited key only from its domain), its subject marked
     * `[Test]` and tagged `broadcast_test`.
     */
    async prepareTest(
      projectId: string,
      id: string,
      input: TestBroadcastInput,
      sender: KeySender,
    ): Promise<{ plan: SendPlan; view: BroadcastTestView }> {
      const broadcast = await deps.broadcasts.find(projectId, id);
      const to = parseList(input.to, 'to')[0]!;
      if (broadcast.from === null)
        throw invalidParam('from', 'The broadcast has no From.', 'parameter_missing');
      let contact: ContactRecord | undefined;
      if (input.contact !== undefined) contact = await contactOf(projectId, input.contact);
      else
        contact = await deps.contacts.find(projectId, to.address).catch((error: unknown) => {
          if (isNotFound(error)) return undefined;
          throw error;
        });
      const standIn: ContactRecord = {
        id: '',
        projectId,
        email: to.address.toLowerCase(),
        firstName: null,
        lastName: null,
        unsubscribed: false,
        values: {},
        createdAt: '',
        updatedAt: '',
      };
      const copy = await copyFor(broadcast, contact ?? standIn);
      const plan = await deps.emails.prepareSend(
        projectId,
        {
          from: broadcast.from,
          to: [formatAddress(to)],
          ...(broadcast.replyTo.length > 0 ? { reply_to: broadcast.replyTo } : {}),
          subject: `${TEST_PREFIX}${copy.subject}`,
          ...(copy.html === null ? {} : { html: copy.html }),
          ...(copy.text === null ? {} : { text: copy.text }),
          tags: { [TEST_TAG]: broadcast.id },
          tracking: { opens: broadcast.trackOpens, clicks: broadcast.trackClicks },
          unsubscribe: true,
        },
        sender,
      );
      return {
        plan,
        view: {
          object: 'broadcast_test',
          broadcast_id: broadcast.id,
          email_id: plan.emails[0]!.id,
          to: formatAddress(to),
          contact_id: contact?.id ?? null,
        },
      };
    },
  };
}

export type BroadcastTests = ReturnType<typeof createBroadcastTests>;
