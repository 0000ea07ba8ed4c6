import type { ContactPropertyRecord } from './contact-properties.repo.ts';
import type { ContactRecord } from './contacts.repo.ts';

// A project's contacts as CSV (GET /v1/contacts/export), written as it is read: a keyset page at a time, so an
// export of a million contacts holds one page. The columns are what an import reads without a column map
// (email, first_name, last_name, unsubscribed, the property keys), so an export imports back as it was.

/** Contacts per page read. */
export const EXPORT_PAGE = 1000;

/** A CSV field: quoted when it holds a comma, a quote, a line break or spaces at either end (RFC 4180). */
export function csvField(value: string): string {
  return /[",\r\n]|^\s|\s$/.test(value) ? `"${value.replace(/"/g, '""')}"` : value;
}

const line = (fields: readonly string[]) => `${fields.map(csvField).join(',')}\r\n`;

/** The header and a line per contact, `page(afterId)` read until it comes back short. */
export async function* csvLines(
  declared: readonly ContactPropertyRecord[],
  page: (afterId: string | undefined) => Promise<ContactRecord[]>,
): AsyncIterable<string> {
  yield line([
    'email',
    'first_name',
    'last_name',
    'unsubscribed',
    ...declared.map((property) => property.key),
    'id',
    'created_at',
    'updated_at',
  ]);
  let afterId: string | undefined;
  for (;;) {
    const records = await page(afterId);
    let chunk = '';
    for (const record of records) {
      chunk += line([
        record.email,
        record.firstName ?? '',
        record.lastName ?? '',
        record.unsubscribed ? 'true' : 'false',
        ...declared.map((property) => {
          const value = record.values[property.id];
          return value === undefined ? '' : String(value);
        }),
        record.id,
        record.createdAt,
        record.updatedAt,
      ]);
    }
    if (chunk !== '') yield chunk;
    if (records.length < EXPORT_PAGE) return;
    afterId = records[records.length - 1]!.id;
  }
}
