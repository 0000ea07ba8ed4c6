import { createBoundedMemo } from '../../lib/memo.ts';
import { DomainError, invalidParam } from '../../lib/errors.ts';
import { isId, newId } from '../../lib/ids.ts';
import { formatAddress } from '../../lib/addresses.ts';
import type { DecodedFields } from '../../lib/base64.ts';
import { missingVariables, type TemplateRenderer, withDefaults } from '../templates/render.ts';
import type { TemplateRepo, TemplateVersionRecord } from '../templates/templates.repo.ts';
import { ALIAS_PATTERN } from '../templates/templates.schemas.ts';
import type { DomainService, SenderAuthentication } from '../domains/domains.service.ts';
import {
  type SuppressionRecord,
  type SuppressionRepo,
  suppressionKey,
} from '../suppressions/suppressions.repo.ts';
import type { NewEmail } from './emails.repo.ts';
import type { SendEmailInput } from './emails.schemas.ts';
import { checkAttachments } from './attachments.ts';
import { trackedLinks, UNSUBSCRIBE_PLACEHOLDER } from './tracked-html.ts';
import {
  checkHeaders,
  checkOwnContent,
  checkRecipients,
  checkScheduledAt,
  checkTags,
  checkTemplateAlone,
  hasLineBreak,
  parseList,
  resolveTracking,
} from './send-checks.ts';
import type { Transaction } from '../../db/transaction.ts';
import type { ReputationService } from '../reputation/reputation.service.ts';

/*
 * A send made ready to store, before any transaction: its input checked (send-checks.ts), its template
 * rendered, its tracking resolved, its sender domain authorized, and its recipients marked against the
 * suppression list.
 */

/** What the sending key allows (the caller's): `domainId`, the one domain it may send from, or null for any. */
export interface KeySender {
  domainId: string | null;
}

/** A send checked and rendered before its transaction: its emails and the time it was accepted. */
export interface SendPlan {
  emails: NewEmail[];
  now: Date;
}

export type SuppressedEntries = Map<string, SuppressionRecord>;

export interface SendPreparerDeps {
  templates: TemplateRepo;
  renderer: TemplateRenderer;
  /** Which From domains the project may send as, and how they are signed (the domains module). */
  senders?: Pick<DomainService, 'authorizeSender' | 'authorizeKeyDomain'> | undefined;
  /** The projects' suppression lists: read before a grouped send's transaction, in a keyed send's. */
  suppressions: Pick<SuppressionRepo, 'matchingIn'>;
  /** PUBLIC_URL and the tracking defaults (unset PUBLIC_URL: a send asking for tracking is refused). */
  engagement: Parameters<typeof resolveTracking>[3];
  /** The reputation breaker: a send from a paused project or domain is refused (403 `sending_paused`). */
  reputation?: Pick<ReputationService, 'assertSendingAllowed'> | undefined;
}

const USED_VARIABLES_CACHE_SIZE = 1000;
const aliasShape = new RegExp(ALIAS_PATTERN);

export function createSendPreparer({
  templates,
  renderer,
  senders,
  suppressions,
  engagement,
  reputation,
}: SendPreparerDeps) {
  // What each published version needs, read from its Liquid once: versions never change, and a batch of
  // sends of one template would otherwise parse it once per email. Bounded, oldest entries dropped first.
  const usedVariables = createBoundedMemo<string, string[]>(USED_VARIABLES_CACHE_SIZE);
  const variablesUsedBy = (version: TemplateVersionRecord): string[] =>
    usedVariables(`${version.templateId}:${version.version}`, () => renderer.requiredVariables(version));

  async function renderTemplate(
    projectId: string,
    ref: NonNullable<SendEmailInput['template']>,
    prefix: string,
    unsubscribe: boolean,
  ): Promise<{ subject: string; html: string | null; text: string | null; id: string; version: number }> {
    const param = (name: string) => `${prefix}template.${name}`;
    let template;
    if (isId('tpl', ref.id)) template = await templates.find(projectId, ref.id);
    else if (aliasShape.test(ref.id)) template = await templates.findByAlias(projectId, ref.id);
    if (!template) {
      throw new DomainError('not_found', 'resource_missing', `No template with id '${ref.id}'.`, param('id'));
    }
    const number = ref.version ?? template.publishedVersion;
    if (number === null) {
      throw invalidParam(
        param('id'),
        `Template '${ref.id}' has no published version; publish it first.`,
        'template_not_published',
      );
    }
    const version = await templates.findVersion(projectId, template.id, number);
    if (!version) {
      throw new DomainError(
        'not_found',
        'resource_missing',
        `Template '${ref.id}' has no version ${number}.`,
        param('version'),
      );
    }
    // `{{ unsubscribe_url }}` renders as itself; each recipient's copy gets its own URL there at send time.
    const given = unsubscribe
      ? { ...ref.variables, unsubscribe_url: UNSUBSCRIBE_PLACEHOLDER }
      : (ref.variables ?? {});
    const variables = withDefaults(given, version.variableDefaults);
    // The declared variables, and the ones the template prints unconditionally, declared or not.
    const missing = missingVariables([...version.variables, ...variablesUsedBy(version)], variables);
    if (missing.length > 0) {
      throw invalidParam(
        param('variables'),
        `Missing template variable${missing.length > 1 ? 's' : ''}: ${missing.join(', ')}.`,
        'template_variables_missing',
      );
    }
    let rendered;
    try {
      rendered = await renderer.render(version, variables);
    } catch (error) {
      // The renderer names the template's field; here the fault is in the send, so it points at the template.
      if (error instanceof DomainError)
        throw new DomainError(error.kind, error.code, error.message, param('variables'));
      throw error;
    }
    if (rendered.subject === null || rendered.subject.trim() === '') {
      throw invalidParam(
        param('id'),
        `Template '${ref.id}' renders an empty subject.`,
        'template_subject_missing',
      );
    }
    if (hasLineBreak(rendered.subject)) {
      throw invalidParam(param('variables'), 'The rendered subject contains a line break.');
    }
    return {
      subject: rendered.subject,
      html: rendered.html,
      text: rendered.text,
      id: template.id,
      version: number,
    };
  }

  /**
   * The sender-domain rule, for From (and over SMTP for Sender, Resent-From and Resent-Sender too): a
   * domain-limited key sends only from its domain, and the project only as a domain SENDER_DOMAINS lets it
   * (domains.service). Refused: a 4xx naming `param`. Decisions are kept in `decided`, by domain.
   */
  async function authorizeSenderDomain(
    projectId: string,
    domain: string,
    param: string,
    /** The sending key's one domain (api_keys.domain_id), when it is limited to one. */
    keyDomainId: string | null,
    decided: Map<string, SenderAuthentication>,
  ): Promise<SenderAuthentication | undefined> {
    let authentication = decided.get(domain);
    if (!authentication && keyDomainId !== null) {
      // Without the domains module nothing can say what the domain is: refused rather than let through.
      if (!senders) throw new Error('a domain-limited key needs the domains service');
      await senders.authorizeKeyDomain(projectId, keyDomainId, domain, param);
    }
    if (senders && !authentication) {
      authentication = await senders.authorizeSender(projectId, domain, param);
      decided.set(domain, authentication);
    }
    return authentication;
  }

  /** Validates and renders one send; throws a 4xx naming the field (prefixed with `[i].` in a batch). */
  async function prepare(
    projectId: string,
    input: SendEmailInput,
    now: Date,
    prefix: string,
    /** The sending key's one domain (api_keys.domain_id), when it is limited to one. */
    keyDomainId: string | null,
    /** The files of a large body, decoded before it reached the route (lib/base64.ts). */
    decoded: DecodedFields | undefined,
    /** Sender decisions already made in this request, by From domain (a batch often repeats one). */
    decided = new Map<string, SenderAuthentication>(),
  ): Promise<NewEmail> {
    const from = parseList(input.from, `${prefix}from`)[0]!;
    await reputation?.assertSendingAllowed(projectId, from.domain, 'transactional', `${prefix}from`);
    const authentication = await authorizeSenderDomain(
      projectId,
      from.domain,
      `${prefix}from`,
      keyDomainId,
      decided,
    );
    const to = parseList(input.to, `${prefix}to`);
    const cc = parseList(input.cc, `${prefix}cc`);
    const bcc = parseList(input.bcc, `${prefix}bcc`);
    const replyTo = parseList(input.reply_to, `${prefix}reply_to`);

    const recipients = checkRecipients({ to, cc, bcc }, prefix);

    const headers = checkHeaders(input.headers, prefix);
    const tags = checkTags(input.tags, prefix);
    const attachments = checkAttachments(input.attachments, prefix, decoded);
    const scheduledAt = checkScheduledAt(input.scheduled_at, now, prefix);
    const wanted = resolveTracking(input, headers, prefix, engagement);

    let subject: string;
    let html: string | null;
    let text: string | null;
    let templateId: string | null = null;
    let templateVersion: number | null = null;
    if (input.template) {
      checkTemplateAlone(input, prefix);
      const rendered = await renderTemplate(projectId, input.template, prefix, wanted?.unsubscribe ?? false);
      ({ subject, html, text } = rendered);
      templateId = rendered.id;
      templateVersion = rendered.version;
    } else {
      ({ subject, html, text } = checkOwnContent(input, prefix));
    }

    const id = newId('msg');
    return {
      id,
      projectId,
      from: formatAddress(from),
      to: to.map(formatAddress),
      cc: cc.map(formatAddress),
      bcc: bcc.map(formatAddress),
      replyTo: replyTo.map(formatAddress),
      subject,
      html,
      text,
      headers,
      tags,
      attachments,
      templateId,
      templateVersion,
      // Made now and stored, so every attempt (and every duplicate a crash may cause) carries the same one.
      messageId: `<${id}@${from.domain}>`,
      source: 'api',
      smtpUsername: null,
      dkimDomain: authentication?.dkimDomain ?? null,
      returnPathDomain: authentication?.returnPathDomain ?? null,
      scheduledAt,
      createdAt: now.toISOString(),
      recipients,
      // The links are found once, here, and stored with the email; each recipient's copy points at them.
      tracking: wanted && {
        ...wanted,
        links: wanted.clicks && html !== null ? trackedLinks(html) : [],
      },
    };
  }

  /**
   * The suppression entries of the emails' recipients, each recipient marked; in `transaction` when given
   * (the caller's), else before the transaction that writes them: an entry added in between is honoured
   * from the next send on, as with any list read at send time.
   */
  async function markSuppressed(emails: NewEmail[], transaction?: Transaction): Promise<SuppressedEntries> {
    const addresses = emails.flatMap((email) => email.recipients.map((recipient) => recipient.address));
    const suppressed = await suppressions.matchingIn(
      emails.map((email) => email.projectId),
      addresses,
      transaction,
    );
    for (const email of emails) {
      for (const recipient of email.recipients) {
        recipient.suppressed = suppressed.has(suppressionKey(email.projectId, recipient.address));
      }
    }
    return suppressed;
  }

  return { prepare, authorizeSenderDomain, markSuppressed };
}

export type SendPreparer = ReturnType<typeof createSendPreparer>;
