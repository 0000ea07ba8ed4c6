import type { ContactPropertyRecord } from '../contacts/contact-properties.repo.ts';
import type { ContactRecord } from '../contacts/contacts.repo.ts';
import type { TemplateRenderer } from '../templates/render.ts';
import type { TemplateRepo } from '../templates/templates.repo.ts';
import type { BroadcastRecord } from './broadcasts.repo.ts';
import { type CopyContent, liquidVariables, resendCopy, withPreviewText } from './personalization.ts';

// What a broadcast's copies say, made once for the fan-out (fan-out.ts) and for a preview or a test
// (broadcast-tests.ts): so a preview shows exactly what a contact's copy will contain.

/**
 * The content a broadcast's copies are made from: its own subject, html and text, or its template's
 * published version (its subject unless the broadcast has one). `undefined` when the template has no
 * published version (deleted or unpublished since).
 */
export async function broadcastContent(
  templates: Pick<TemplateRepo, 'find' | 'findVersion'>,
  broadcast: BroadcastRecord,
): Promise<{ content: CopyContent; templateVersion: number | null } | undefined> {
  if (broadcast.templateId === null) {
    return {
      content: { subject: broadcast.subject ?? '', html: broadcast.html, text: broadcast.text },
      templateVersion: null,
    };
  }
  const template = await templates.find(broadcast.projectId, broadcast.templateId);
  const number = template?.publishedVersion ?? null;
  const version =
    number === null
      ? undefined
      : await templates.findVersion(broadcast.projectId, broadcast.templateId, number);
  if (!version) return undefined;
  return {
    content: { subject: broadcast.subject ?? version.subject ?? '', html: version.html, text: version.text },
    templateVersion: version.version,
  };
}

/**
 * Each contact's copy, personalized in the broadcast's dialect, with its preview text put in the html and
 * its subject on one line. `preferenceUrls[i]` is contact i's preference page URL (or what stands for it).
 */
export async function personalizedCopies(
  renderer: Pick<TemplateRenderer, 'renderMany'>,
  broadcast: BroadcastRecord,
  content: CopyContent,
  contacts: readonly ContactRecord[],
  declared: readonly ContactPropertyRecord[],
  preferenceUrls: readonly string[],
): Promise<CopyContent[]> {
  let made: CopyContent[];
  if (broadcast.personalization === 'resend') {
    made = contacts.map((contact, index) => resendCopy(content, contact, declared, preferenceUrls[index]));
  } else {
    // On the pool, in runs each held to TEMPLATE_RENDER_TIMEOUT of CPU time (render-pool.ts sizes them).
    const rendered = await renderer.renderMany(
      content,
      contacts.map((contact, index) =>
        liquidVariables(contact, declared, broadcast.templateVariables, preferenceUrls[index]),
      ),
    );
    made = rendered.map((each) => ({ subject: each.subject ?? '', html: each.html, text: each.text }));
  }
  return made.map((copy) => ({
    subject: copy.subject.replace(/[\r\n]+/g, ' '),
    html: copy.html === null ? null : withPreviewText(copy.html, broadcast.previewText),
    text: copy.text,
  }));
}
