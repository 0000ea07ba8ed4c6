import { detectMimeType } from 'nodemailer/lib/mime-funcs';
import { base64Bytes, type DecodedFields } from '../../lib/base64.ts';
import { totalBytes } from '../../lib/byte-chunks.ts';
import { invalidParam } from '../../lib/errors.ts';
import type { NewAttachment } from './email-rows.ts';
import { MAX_ATTACHMENT_BYTES, type SendEmailInput } from './emails.schemas.ts';

// Files sent with an email, as a send gives them (base64) and as they are stored and built into the MIME.
// What is stored is what the message will say: a content_id nodemailer would change is refused rather than
// sent changed, and a file sent without a content type gets the one nodemailer will write for it.

const MEDIA_TYPE = /^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*\/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*$/;
/**
 * A Content-ID nodemailer writes as it is given, inside `<…>`: printable ASCII without space, and without `<`
 * or `>`, which nodemailer removes (`a>b@c` would leave as `<ab@c>` and the html's `cid:a>b@c` match nothing).
 */
const CONTENT_ID = /^[!-;=?-~]+$/;

/**
 * The media type the message gives a file: the one sent (lowercased), else the one nodemailer derives from the
 * file name, as it does when it builds the MIME (`report.pdf` → application/pdf; a name without an extension
 * is looked up as a whole, so `c` → text/plain; unknown → application/octet-stream).
 */
export function attachmentContentType(filename: string, given?: string | null): string {
  return given ? given.toLowerCase() : detectMimeType(filename);
}

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

/**
 * Decodes and checks a send's attachments: names sanitised, base64 valid, 40 MiB together at most. `decoded`:
 * the files of a large body, decoded on a thread before the body reached the route (lib/base64.ts).
 */
export function checkAttachments(
  attachments: SendEmailInput['attachments'],
  prefix: string,
  decoded?: DecodedFields,
): NewAttachment[] {
  let total = 0;
  return (attachments ?? []).map((attachment, index) => {
    const param = `${prefix}attachments[${index}]`;
    const filename = sanitizeFilename(attachment.filename);
    if (filename === '') {
      throw invalidParam(`${param}.filename`, `'${attachment.filename}' leaves no file name once made safe.`);
    }
    const content = base64Bytes(attachment.content, decoded);
    if (content === undefined) {
      throw invalidParam(`${param}.content`, `The content of ${param} must be base64.`);
    }
    const size = totalBytes(content);
    total += size;
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
    // `<id>` is the Content-ID's own form: the brackets enclose the id the html refers to.
    const given = attachment.content_id;
    const contentId = given?.startsWith('<') && given.endsWith('>') ? given.slice(1, -1) : given;
    if (contentId !== undefined && !CONTENT_ID.test(contentId)) {
      throw invalidParam(
        `${param}.content_id`,
        `The content_id '${given}' cannot be sent as it is: a content_id is printable ASCII without spaces or ` +
          "angle brackets (it may be enclosed in one pair, '<id>').",
      );
    }
    return {
      filename,
      contentType: attachmentContentType(filename, attachment.content_type),
      contentId: contentId ?? null,
      size,
      content,
    };
  });
}
