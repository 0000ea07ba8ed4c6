import { invalidParam } from '../../lib/errors.ts';
import type { EmailAttachment } from './emails.repo.ts';
import { MAX_ATTACHMENT_BYTES, type SendEmailInput } from './emails.schemas.ts';

// Files sent with an email, as a send gives them (base64) and as they are stored and built into the MIME.

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const MEDIA_TYPE = /^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*\/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*$/;
const CONTENT_ID = /^[\x21-\x7e]+$/;

/**
 * A file name a mail client can show and save safely: no directories, no control characters, no quotes
 * (they would end the MIME parameter), no leading dots (hidden files); empty when nothing is left.
 */
export function sanitizeFilename(name: string): string {
  const base = name.split(/[\\/]/).pop() ?? '';
  return (
    base
      // eslint-disable-next-line no-control-regex -- removing control characters is the point
      .replace(/[\u0000-\u001f\u007f"]/g, '')
      .replace(/^[.\s]+/, '')
      .trim()
      .slice(0, 255)
  );
}

/** Decodes and checks a send's attachments: names sanitised, base64 valid, 40 MiB together at most. */
export function checkAttachments(
  attachments: SendEmailInput['attachments'],
  prefix: string,
): Array<EmailAttachment & { content: Buffer }> {
  let total = 0;
  return (attachments ?? []).map((attachment, index) => {
    const param = `${prefix}attachments[${index}]`;
    const filename = sanitizeFilename(attachment.filename);
    if (filename === '') {
      throw invalidParam(`${param}.filename`, `'${attachment.filename}' leaves no file name once made safe.`);
    }
    // Line breaks are allowed in base64 (MIME wraps it at 76 columns); anything else is not base64.
    const encoded = attachment.content.replace(/[\r\n]/g, '');
    if (encoded.length % 4 !== 0 || !BASE64.test(encoded)) {
      throw invalidParam(`${param}.content`, `The content of ${param} must be base64.`);
    }
    const content = Buffer.from(encoded, 'base64');
    total += content.length;
    if (total > MAX_ATTACHMENT_BYTES) {
      throw invalidParam(
        `${param}.content`,
        `The attachments of an email may be ${MAX_ATTACHMENT_BYTES / 1024 / 1024} MiB together once decoded.`,
        'attachments_too_large',
      );
    }
    if (attachment.content_type !== undefined && !MEDIA_TYPE.test(attachment.content_type)) {
      throw invalidParam(`${param}.content_type`, `'${attachment.content_type}' is not a media type.`);
    }
    const contentId = attachment.content_id?.replace(/^<|>$/g, '');
    if (contentId !== undefined && !CONTENT_ID.test(contentId)) {
      throw invalidParam(`${param}.content_id`, 'A content_id is printable ASCII without spaces.');
    }
    return {
      filename,
      contentType: attachment.content_type?.toLowerCase() ?? null,
      contentId: contentId ?? null,
      size: content.length,
      content,
    };
  });
}
