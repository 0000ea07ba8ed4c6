import { type Static, Type } from '@sinclair/typebox';
import { timeFilter, timestamp } from '../../http/schema-helpers.ts';

const passFail = (what: string) =>
  Type.Object(
    {
      pass: Type.Integer({ description: `Messages that passed ${what}.` }),
      fail: Type.Integer({ description: `Messages that failed ${what}.` }),
    },
    { additionalProperties: false },
  );

const counts = {
  messages: Type.Integer({ description: 'Messages the receivers reported.' }),
  dkim: passFail('DKIM aligned with the From domain'),
  spf: passFail('SPF aligned with the From domain'),
  dmarc: passFail('DMARC (DKIM or SPF aligned)'),
  disposition: Type.Object(
    {
      none: Type.Integer({ description: 'Delivered as the policy asked nothing.' }),
      quarantine: Type.Integer({ description: 'Sent to spam.' }),
      reject: Type.Integer({ description: 'Refused.' }),
    },
    { description: 'What the receivers did, as their reports say.' },
  ),
};

export const DmarcSummary = Type.Object(
  {
    object: Type.Literal('dmarc_summary'),
    domain_id: Type.String(),
    since: timestamp('The start of the period (reports that began at or after it).'),
    until: timestamp('The end of the period (reports that began before it).'),
    reports: Type.Integer({ description: 'Aggregate reports received for the period.' }),
    ...counts,
    sources: Type.Array(
      Type.Object(
        {
          source_ip: Type.String({ description: 'The address that sent as the domain.' }),
          reporter: Type.String({ description: "The receiver that reported it (the report's `org_name`)." }),
          ...counts,
        },
        { title: 'DmarcSource' },
      ),
      { description: 'Per sending address and reporter, most messages first (100 at most).' },
    ),
  },
  { title: 'DmarcSummary' },
);
export type DmarcSummaryView = Static<typeof DmarcSummary>;

export const DmarcSummaryQuery = Type.Object(
  {
    since: Type.Optional(
      timeFilter('Reports that began at or after this time (default: 30 days before `until`).'),
    ),
    until: Type.Optional(timeFilter('Reports that began before this time (default: now).')),
  },
  { additionalProperties: false },
);
export type DmarcSummaryQuery = Static<typeof DmarcSummaryQuery>;
