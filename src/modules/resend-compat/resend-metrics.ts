import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { projectOf } from '../../http/auth.ts';
import { invalidParam } from '../../lib/errors.ts';
import type { Counts, Granularity, UsageService } from '../usage/usage.service.ts';
import { notImplemented } from './resend-errors.ts';
import { hide } from './resend-routing.ts';

// Resend's `emails.metrics` over Postwire's daily counts (GET /v1/stats): every email of the project, per UTC
// day, summed per day, ISO week or month. What those counts cannot tell (an hour, a timezone's day, a domain,
// an email, a broadcast, the emails accepted) answers 501 with why; docs/api/resend.md maps each metric.

const part = (value: number, of: number) => (of > 0 ? value / of : 0);

/** Each of Resend's metrics from Postwire's counts; `received` (emails accepted) is not counted per day. */
const METRICS = {
  sent: (c: Counts) => c.sent,
  delivered: (c: Counts) => c.delivered,
  delivery_delayed: (c: Counts) => c.delivery_delayed,
  bounced: (c: Counts) => c.bounced,
  bounced_permanent: (c: Counts) => c.bounced_hard,
  bounced_transient: (c: Counts) => c.bounced_soft + c.bounced_policy,
  bounced_undetermined: (c: Counts) => c.bounced_undetermined,
  failed: (c: Counts) => c.failed,
  complained: (c: Counts) => c.complained,
  suppressed: (c: Counts) => c.suppressed,
  unsubscribed: (c: Counts) => c.unsubscribed,
  opened: (c: Counts) => c.opened,
  clicked: (c: Counts) => c.clicked,
  // Recipients a person opened (clicked); a machine's first open (a privacy proxy, a scanner) is not one.
  unique_opened: (c: Counts) => c.unique_opens,
  unique_clicked: (c: Counts) => c.unique_clicks,
  delivery_rate: (c: Counts) => part(c.delivered, c.sent),
  open_rate: (c: Counts) => part(c.unique_opens, c.delivered),
  click_rate: (c: Counts) => part(c.unique_clicks, c.delivered),
  // As GET /v1/stats: a bounced recipient was never sent.
  bounce_rate: (c: Counts) => part(c.bounced, c.sent + c.bounced),
  complaint_rate: (c: Counts) => part(c.complained, c.sent),
  unsubscribe_rate: (c: Counts) => part(c.unsubscribed, c.delivered),
} satisfies Record<string, (counts: Counts) => number>;
type MetricName = keyof typeof METRICS;
const ALL_METRICS = Object.keys(METRICS) as MetricName[];

const RESEND_METRICS = new Set<string>([...ALL_METRICS, 'received']);
const DIMENSIONS = new Set(['period', 'domain', 'email', 'broadcast']);
const GRANULARITIES = new Set(['hourly', 'daily', 'weekly', 'monthly']);
/** Resend's default range: the end date and the 6 days before it. */
const DEFAULT_DAYS = 7;

const MetricsQuery = Type.Object(
  {
    start_date: Type.Optional(Type.String({ minLength: 1 })),
    end_date: Type.Optional(Type.String({ minLength: 1 })),
    timezone: Type.Optional(Type.String({ minLength: 1 })),
    granularity: Type.Optional(Type.String({ minLength: 1 })),
    metrics: Type.Optional(Type.String({ minLength: 1 })),
    dimensions: Type.Optional(Type.String({ minLength: 1 })),
    domain_id: Type.Optional(Type.String({ minLength: 1 })),
    email_id: Type.Optional(Type.String({ minLength: 1 })),
    broadcast_id: Type.Optional(Type.String({ minLength: 1 })),
  },
  { additionalProperties: false },
);

/** A comma-separated list, each a known value (else 422 naming `param`). */
function listOf(value: string | undefined, known: Set<string>, param: string): string[] {
  const items = value === undefined ? [] : value.split(',').map((item) => item.trim());
  for (const item of items) {
    if (!known.has(item)) {
      throw invalidParam(param, `'${item}' is not one of ${param}: ${[...known].join(', ')}.`);
    }
  }
  return [...new Set(items)];
}

const PER_DAY = "Postwire's counts are per project and UTC day (GET /v1/stats)";

export function registerResendMetricsRoutes(
  server: FastifyInstance,
  { usage }: { usage: UsageService },
): void {
  server.withTypeProvider<TypeBoxTypeProvider>().get(
    '/emails/metrics',
    {
      config: { permission: 'read_only' },
      schema: { ...hide, querystring: MetricsQuery },
    },
    async (request, reply) => {
      const query = request.query;
      const dimensions = listOf(query.dimensions, DIMENSIONS, 'dimensions');
      const metrics = listOf(query.metrics, RESEND_METRICS, 'metrics');
      const granularity = query.granularity ?? 'daily';
      if (!GRANULARITIES.has(granularity)) {
        throw invalidParam(
          'granularity',
          `'${granularity}' is not one of granularity: hourly, daily, weekly, monthly.`,
        );
      }
      const apart = dimensions.find((dimension) => dimension !== 'period');
      const filter = (['domain_id', 'email_id', 'broadcast_id'] as const).find(
        (name) => query[name] !== undefined,
      );
      if (apart || filter) {
        return notImplemented(
          reply,
          `${PER_DAY}, not per ${(apart ?? filter!).replace('_id', '')}: no ${apart ? 'dimension' : 'filter'} '${apart ?? filter}'.`,
        );
      }
      if (granularity === 'hourly') return notImplemented(reply, `${PER_DAY}: no hourly granularity.`);
      if (query.timezone !== undefined && !['UTC', 'Etc/UTC'].includes(query.timezone)) {
        return notImplemented(reply, `${PER_DAY}: no timezone but UTC.`);
      }
      if (metrics.includes('received')) {
        return notImplemented(
          reply,
          `${PER_DAY}, which do not count the emails accepted: no metric 'received' (sent is what the next hop accepted).`,
        );
      }
      const chosen = (metrics.length > 0 ? metrics : ALL_METRICS) as MetricName[];
      const measured = (counts: Counts) =>
        Object.fromEntries(chosen.map((metric) => [metric, METRICS[metric](counts)]));
      const counted = await usage.periods(
        projectOf(request),
        { since: query.start_date, until: query.end_date, granularity: granularity as Granularity },
        DEFAULT_DAYS,
        { since: 'start_date', until: 'end_date' },
      );
      return {
        object: 'metrics' as const,
        // Whole UTC days are counted: the range is the days of the dates given.
        start_date: `${counted.since}T00:00:00.000Z`,
        end_date: `${counted.until}T23:59:59.999Z`,
        metrics: chosen,
        dimensions,
        granularity,
        totals: measured(counted.total),
        ...(dimensions.includes('period')
          ? {
              data: counted.periods.map(({ start, counts }) => ({
                period: `${start}T00:00:00.000Z`,
                ...measured(counts),
              })),
            }
          : {}),
      };
    },
  );
}
