import { Type } from '@sinclair/typebox';
import { nullable, timestamp } from '../../http/schema-helpers.ts';
import { MAX_DAILY_ALLOWANCE, MAX_SCHEDULE_DAYS } from '../../lib/warmup-schedule.ts';

const Schedule = Type.Array(Type.Integer({ minimum: 1, maximum: MAX_DAILY_ALLOWANCE }), {
  minItems: 1,
  maxItems: MAX_SCHEDULE_DAYS,
  description:
    'Messages per destination (a large provider: Google, Microsoft, Yahoo, …) per UTC day, day 1 first; past the last day the domain is warm and nothing is held.',
});

export const Warmup = Type.Object(
  {
    object: Type.Literal('warmup'),
    domain_id: Type.String(),
    domain: Type.String({ description: "The domain's name." }),
    enabled: Type.Boolean(),
    schedule: Schedule,
    default_schedule: Type.Boolean({ description: "The schedule is the server's (`WARMUP_SCHEDULE`)." }),
    started_at: nullable(timestamp('When it was enabled: day 1 is that UTC day. Null when off.')),
    day: nullable(Type.Integer({ description: 'The day of the schedule today; null when off or warm.' })),
    allowance_per_destination: nullable(
      Type.Integer({ description: "Today's allowance per destination; null when off or warm." }),
    ),
    ends_at: nullable(timestamp('When the schedule ends and the domain is warm; null when off.')),
    today: Type.String({ description: 'The UTC day the counts are of (YYYY-MM-DD).' }),
    used_today: Type.Array(
      Type.Object({
        destination: Type.String({ description: 'A destination (docs/api/destinations.md).' }),
        used: Type.Integer({ description: "Messages it took of today's allowance." }),
      }),
    ),
    updated_at: nullable(timestamp('When it was last set; null when never.')),
  },
  { title: 'Warmup' },
);

export const SetWarmupBody = Type.Object(
  {
    enabled: Type.Boolean({ description: "On: mail over the day's allowance waits. Off: nothing is held." }),
    schedule: Type.Optional(nullable(Schedule, "Null: the server's (`WARMUP_SCHEDULE`); absent: as it was.")),
    restart: Type.Optional(
      Type.Boolean({
        description: 'Day 1 again from today (turning it on from off always starts at day 1).',
      }),
    ),
  },
  { title: 'SetWarmup', additionalProperties: false },
);
