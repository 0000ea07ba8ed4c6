import { isIP } from 'node:net';
import { XMLParser } from 'fast-xml-parser';

// A DMARC aggregate report's XML (RFC 7489 appendix C) read into what Postwire keeps of it. Every byte is
// hostile: no DOCTYPE is taken (a report has none, and entity expansion is how an XML bomb works), no entity
// is expanded but the five XML predefines, and the rows read are capped. Runs on a parse thread.

export type AlignmentResult = 'pass' | 'fail';
export type Disposition = 'none' | 'quarantine' | 'reject';

export interface AggregateRow {
  sourceIp: string;
  count: number;
  disposition: Disposition;
  /** policy_evaluated: DKIM and SPF as DMARC saw them, aligned with the From domain. */
  dkim: AlignmentResult;
  spf: AlignmentResult;
  headerFrom: string;
}

export interface AggregateReport {
  orgName: string;
  reportId: string;
  /** The report's period, ISO 8601 (date_range begin and end, seconds since the epoch in the XML). */
  begin: string;
  end: string;
  /** policy_published: the domain the report is about, lowercased. */
  domain: string;
  policy: string | null;
  rows: AggregateRow[];
}

export const AGGREGATE_LIMITS = {
  /** Rows (`<record>`) in one report: a large sender's daily report from Google runs to a few thousand. */
  rows: 20_000,
  /** Element nesting: the schema is 5 deep. */
  depth: 16,
} as const;

const PREDEFINED: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };
const unescape = (text: string) =>
  text.replace(/&(amp|lt|gt|quot|apos|#\d{1,7}|#x[0-9a-f]{1,6});/gi, (whole, name: string) => {
    if (name[0] !== '#') return PREDEFINED[name.toLowerCase()] ?? whole;
    const code =
      name[1] === 'x' || name[1] === 'X' ? parseInt(name.slice(2), 16) : parseInt(name.slice(1), 10);
    return code <= 0x10ffff ? String.fromCodePoint(code) : whole;
  });

const text = (value: unknown): string => {
  if (value === undefined || value === null) return '';
  if (typeof value === 'object') return text((value as Record<string, unknown>)['#text']);
  return unescape(String(value)).trim();
};
const list = (value: unknown): unknown[] =>
  value === undefined ? [] : Array.isArray(value) ? value : [value];
const child = (value: unknown, name: string): unknown =>
  value && typeof value === 'object' ? (value as Record<string, unknown>)[name] : undefined;

const timestamp = (value: unknown): string | undefined => {
  const seconds = Number(text(value));
  return Number.isSafeInteger(seconds) && seconds >= 0 && seconds < 4_102_444_800
    ? new Date(seconds * 1000).toISOString()
    : undefined;
};
const result = (value: unknown): AlignmentResult => (text(value).toLowerCase() === 'pass' ? 'pass' : 'fail');
const disposition = (value: unknown): Disposition => {
  const read = text(value).toLowerCase();
  return read === 'quarantine' || read === 'reject' ? read : 'none';
};

export class AggregateRefused extends Error {}

/** Reads a report's XML; throws AggregateRefused with why when it is not one, or breaks a cap. */
export function readAggregateXml(xml: string): AggregateReport {
  if (/<!DOCTYPE|<!ENTITY/i.test(xml)) throw new AggregateRefused('an XML DOCTYPE or entity declaration');
  let depth = 0;
  let deepest = 0;
  for (const match of xml.matchAll(/<(\/?)[A-Za-z_]/g)) {
    depth += match[1] ? -1 : 1;
    deepest = Math.max(deepest, depth);
  }
  if (deepest > AGGREGATE_LIMITS.depth)
    throw new AggregateRefused(`XML nested over ${AGGREGATE_LIMITS.depth} deep`);
  const parser = new XMLParser({
    processEntities: false,
    htmlEntities: false,
    ignoreAttributes: true,
    parseTagValue: false,
    removeNSPrefix: true,
    ignoreDeclaration: true,
    ignorePiTags: true,
  });
  let document: unknown;
  try {
    document = parser.parse(xml);
  } catch (error) {
    throw new AggregateRefused(`not XML: ${(error as Error).message.slice(0, 120)}`);
  }
  const feedback = child(document, 'feedback');
  if (!feedback) throw new AggregateRefused('XML without a <feedback> element');
  const metadata = child(feedback, 'report_metadata');
  const range = child(metadata, 'date_range');
  const published = child(feedback, 'policy_published');
  const records = list(child(feedback, 'record'));
  if (records.length > AGGREGATE_LIMITS.rows) {
    throw new AggregateRefused(`more than ${AGGREGATE_LIMITS.rows} records`);
  }
  const begin = timestamp(child(range, 'begin'));
  const end = timestamp(child(range, 'end'));
  const domain = text(child(published, 'domain')).toLowerCase().replace(/\.$/, '');
  const orgName = text(child(metadata, 'org_name'));
  const reportId = text(child(metadata, 'report_id'));
  if (!begin || !end || !domain || !orgName || !reportId) {
    throw new AggregateRefused(
      'a report without its org_name, report_id, date_range or policy_published domain',
    );
  }
  const rows: AggregateRow[] = [];
  for (const record of records) {
    const row = child(record, 'row');
    const evaluated = child(row, 'policy_evaluated');
    const sourceIp = text(child(row, 'source_ip'));
    const count = Number(text(child(row, 'count')));
    if (isIP(sourceIp) === 0 || !Number.isSafeInteger(count) || count < 0) continue;
    rows.push({
      sourceIp,
      count,
      disposition: disposition(child(evaluated, 'disposition')),
      dkim: result(child(evaluated, 'dkim')),
      spf: result(child(evaluated, 'spf')),
      headerFrom: text(child(child(record, 'identifiers'), 'header_from')).toLowerCase() || domain,
    });
  }
  const policy = text(child(published, 'p')).toLowerCase();
  return {
    orgName: orgName.slice(0, 200),
    reportId: reportId.slice(0, 200),
    begin,
    end,
    domain,
    policy: policy || null,
    rows,
  };
}
