import { escapeHtml } from '../../lib/escape-html.ts';
import type { ContactPropertyRecord, PropertyValue } from '../contacts/contact-properties.repo.ts';
import type { ContactRecord } from '../contacts/contacts.repo.ts';
import { UNSUBSCRIBE_PLACEHOLDER } from '../emails/tracked-html.ts';

// A broadcast's copy made for one contact, in either dialect: Liquid (/v1: `{{ contact.first_name }}`,
// `{{ contact.properties.plan }}`, `{{ unsubscribe_url }}`), or Resend's triple braces (/resend:
// `{{{FIRST_NAME|there}}}`, `{{{LAST_NAME}}}`, `{{{EMAIL}}}`, `{{{<property key>|fallback}}}`,
// `{{{RESEND_UNSUBSCRIBE_URL}}}`). Either way the unsubscribe URL stays the placeholder the sending worker
// fills with each recipient's own URL (engagement/personalize.ts). The contact's preference page URL
// (`{{ preferences_url }}`, `{{{PREFERENCES_URL}}}`) is per contact, so it is written in here, at fan-out.

export interface CopyContent {
  subject: string;
  html: string | null;
  text: string | null;
}

/** A contact's properties by key: its own values, else each property's fallback (absent when neither). */
export function propertiesOf(
  contact: ContactRecord,
  declared: readonly ContactPropertyRecord[],
): Record<string, PropertyValue> {
  const properties: Record<string, PropertyValue> = {};
  for (const property of declared) {
    const value = contact.values[property.id] ?? property.fallbackValue;
    if (value !== null && value !== undefined) properties[property.key] = value;
  }
  return properties;
}

/**
 * The Liquid variables of one contact's copy: `contact`, `unsubscribe_url`, `preferences_url` (empty without
 * PUBLIC_URL), and a template's own variables.
 */
export function liquidVariables(
  contact: ContactRecord,
  declared: readonly ContactPropertyRecord[],
  variables: Record<string, unknown> | null,
  preferencesUrl = '',
): Record<string, unknown> {
  return {
    ...variables,
    contact: {
      id: contact.id,
      email: contact.email,
      first_name: contact.firstName ?? '',
      last_name: contact.lastName ?? '',
      properties: propertiesOf(contact, declared),
    },
    unsubscribe_url: UNSUBSCRIBE_PLACEHOLDER,
    preferences_url: preferencesUrl,
  };
}

const RESEND_VARIABLE = /\{\{\{\s*([A-Za-z0-9_]+)\s*(?:\|([^}]*))?\}\}\}/g;

/** Whether content uses Resend's triple braces at all (most copies of a plain broadcast need no work). */
export const hasResendVariables = (content: string): boolean => content.includes('{{{');

/**
 * Resend's personalization in one field: each `{{{NAME|fallback}}}` replaced by the contact's value (escaped
 * in html), else the fallback written there, else the property's declared fallback, else nothing. Property
 * keys are matched as written, then without regard to case.
 */
export function resendPersonalize(
  content: string,
  contact: ContactRecord,
  declared: readonly ContactPropertyRecord[],
  html: boolean,
  preferencesUrl = '',
): string {
  if (!hasResendVariables(content)) return content;
  return content.replace(RESEND_VARIABLE, (_whole, name: string, fallback: string | undefined) => {
    const upper = name.toUpperCase();
    if (upper === 'RESEND_UNSUBSCRIBE_URL') return UNSUBSCRIBE_PLACEHOLDER;
    if (upper === 'PREFERENCES_URL') return html ? escapeHtml(preferencesUrl) : preferencesUrl;
    let value: PropertyValue | null | undefined;
    if (upper === 'FIRST_NAME') value = contact.firstName;
    else if (upper === 'LAST_NAME') value = contact.lastName;
    else if (upper === 'EMAIL') value = contact.email;
    else {
      const property =
        declared.find((each) => each.key === name) ??
        declared.find((each) => each.key.toLowerCase() === name.toLowerCase());
      value =
        property && (contact.values[property.id] ?? (fallback === undefined ? property.fallbackValue : null));
    }
    const text =
      value === null || value === undefined || value === '' ? (fallback ?? '').trim() : String(value);
    return html ? escapeHtml(text) : text;
  });
}

/** A copy in Resend's dialect: the subject, html and text each personalized. */
export function resendCopy(
  content: CopyContent,
  contact: ContactRecord,
  declared: readonly ContactPropertyRecord[],
  preferencesUrl = '',
): CopyContent {
  const fill = (field: string, html: boolean) =>
    resendPersonalize(field, contact, declared, html, preferencesUrl);
  return {
    subject: fill(content.subject, false),
    html: content.html === null ? null : fill(content.html, true),
    text: content.text === null ? null : fill(content.text, false),
  };
}

/**
 * The preview text (preheader): shown by mail clients after the subject, hidden in the message itself. Put
 * first in the html's body.
 */
export function withPreviewText(html: string, previewText: string | null): string {
  if (previewText === null || previewText === '') return html;
  const hidden =
    '<div style="display:none;max-height:0;overflow:hidden;mso-hide:all" aria-hidden="true">' +
    `${escapeHtml(previewText)}</div>`;
  const body = /<body\b[^>]*>/i.exec(html);
  if (!body) return hidden + html;
  const at = body.index + body[0].length;
  return html.slice(0, at) + hidden + html.slice(at);
}
