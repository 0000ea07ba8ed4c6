import type { EmailRecord } from './emails.repo.ts';

/** The data every event of an email's recipient carries (`email.*`), plus what the event adds. */
export function emailEventData(
  email: Pick<
    EmailRecord,
    'id' | 'from' | 'to' | 'subject' | 'templateId' | 'templateVersion' | 'tags' | 'messageId'
  >,
  recipient: string,
  extra: Record<string, unknown>,
): Record<string, unknown> {
  return {
    email_id: email.id,
    from: email.from,
    to: email.to,
    subject: email.subject,
    message_id: email.messageId,
    ...(email.templateId !== null
      ? { template_id: email.templateId, template_version: email.templateVersion }
      : {}),
    tags: email.tags,
    recipient,
    ...extra,
  };
}
