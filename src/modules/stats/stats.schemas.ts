import { type Static, Type } from '@sinclair/typebox';
import { timeFilter } from '../../http/schema-helpers.ts';

const count = (description: string) => Type.Integer({ minimum: 0, description });
const rate = (description: string) => Type.Union([Type.Number(), Type.Null()], { description });

const countFields = {
  sent: count('Accepted by the next hop (`email.sent`).'),
  delivered: count("Accepted by the recipient's server (`email.delivered`)."),
  delivery_delayed: count('Recipients that started waiting for a retry.'),
  bounced: count('Permanently rejected (`email.bounced`), of every type.'),
  bounced_hard: count('Bounces of type `hard` (the address does not exist).'),
  bounced_soft: count('Bounces of type `soft`.'),
  bounced_policy: count('Bounces of type `policy` (authentication, reputation: the sender’s problem).'),
  bounced_undetermined: count('Bounces without an enhanced status code.'),
  failed: count('Abandoned after the last retry.'),
  complained: count('Marked as spam.'),
  suppressed: count('Not sent: on the suppression list.'),
  unsubscribed: count('One-click unsubscribes.'),
  opened: count('Open pixel fetches, every one.'),
  clicked: count('Tracked link clicks, every one.'),
  unique_opens: count('Recipients a person opened for the first time that day.'),
  unique_opens_automated: count(
    'Recipients a machine (Apple Mail Privacy Protection, a scanner) opened first that day.',
  ),
  unique_clicks: count('Recipients who clicked (a person) for the first time that day.'),
  unique_clicks_automated: count(
    'Recipients whose links a machine (a link scanner) followed first that day.',
  ),
  bounce_rate: rate('bounced / (sent + bounced); null with nothing sent.'),
  complaint_rate: rate(
    'complained / sent; null with nothing sent. Gmail asks bulk senders to stay under 0.3 % (0.1 % recommended).',
  ),
};

export const StatsCounts = Type.Object(countFields, { title: 'StatsCounts' });

export const StatsDay = Type.Object(
  { date: Type.String({ description: 'The UTC day, YYYY-MM-DD.' }), ...countFields },
  { title: 'StatsDay' },
);

export const Stats = Type.Object(
  {
    object: Type.Literal('stats'),
    since: Type.String({ description: 'First UTC day counted (YYYY-MM-DD).' }),
    until: Type.String({ description: 'Last UTC day counted (YYYY-MM-DD).' }),
    tag: Type.Union([Type.String(), Type.Null()], { description: 'The tag filter (`name:value`), if any.' }),
    total: StatsCounts,
    days: Type.Array(StatsDay, { description: 'Every day of the range, oldest first.' }),
    thresholds: Type.Object(
      {
        complaint_rate: Type.Number({ description: 'Gmail’s limit for bulk senders: 0.003 (0.3 %).' }),
        complaint_rate_recommended: Type.Number({ description: 'Gmail’s recommendation: 0.001 (0.1 %).' }),
      },
      { description: 'The thresholds Gmail publishes for bulk senders.' },
    ),
    complaint_rate_ok: Type.Boolean({
      description: 'True while the total complaint rate is under the limit.',
    }),
  },
  { title: 'Stats' },
);

export const StatsQuery = Type.Object(
  {
    since: Type.Optional(
      timeFilter('The first UTC day counted: the day of this time (default: 29 days before until).'),
    ),
    until: Type.Optional(timeFilter('The last UTC day counted: the day of this time (default: today).')),
    tag: Type.Optional(
      Type.String({
        pattern: '^[A-Za-z0-9_-]{1,256}:[A-Za-z0-9_-]{1,256}$',
        description: 'Only emails sent with this tag, as `name:value` (`kind:receipt`).',
      }),
    ),
  },
  { additionalProperties: false },
);

export type StatsView = Static<typeof Stats>;
export type StatsQueryInput = Static<typeof StatsQuery>;
