// The operator's view of what the SMTP listener received: `inbound list` and `inbound received`.
import { type Command, json, listing, oneLine, UsageError, type Values } from './command.ts';

/** `--limit`: 50 when absent, else a whole number from 1 to 1000. */
function limitOf(command: string, values: Values): number {
  const limit = values.limit === undefined ? 50 : Number(values.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) {
    throw new UsageError(`${command}: --limit takes a whole number from 1 to 1000.`);
  }
  return limit;
}

export const inboundCommands: Command[] = [
  {
    words: ['inbound', 'list'],
    options: { all: { type: 'boolean' }, limit: { type: 'string' }, ...json },
    async run(context, values) {
      const limit = limitOf('inbound list', values);
      const { inbound } = await context.services();
      const rows = await inbound.listForOperator({ all: values.all === true, limit });
      context.io.stdout.write(
        listing(values, rows, {
          headers: ['ID', 'RECEIVED', 'STATUS', 'KIND', 'FROM', 'TO', 'WHY'],
          cells: (row) => [
            row.id,
            row.receivedAt,
            row.status,
            row.kind ?? '',
            row.mailFrom || '<>',
            row.rcptTo.join(','),
            row.detail ?? '',
          ],
          empty: values.all === true ? 'No messages received.' : 'No unmatched or unreadable reports.',
        }),
      );
      return 0;
    },
  },
  {
    words: ['inbound', 'received'],
    options: { limit: { type: 'string' }, ...json },
    async run(context, values) {
      const limit = limitOf('inbound received', values);
      const { received } = await context.services();
      const rows = (await received.latest(limit)).map((record) => ({
        id: record.id,
        received_at: record.receivedAt,
        project_id: record.projectId,
        recipient: record.recipient,
        from: record.fromAddress,
        subject: record.subject,
        status: record.status,
        route_id: record.routeId,
      }));
      context.io.stdout.write(
        listing(values, rows, {
          headers: ['ID', 'RECEIVED', 'PROJECT', 'RECIPIENT', 'FROM', 'SUBJECT', 'STATUS', 'ROUTE'],
          cells: (row) => [
            row.id,
            row.received_at,
            row.project_id,
            row.recipient,
            row.from ?? '',
            // One line per email: a subject is the sender's text, of any length.
            oneLine(row.subject ?? '', 60),
            row.status,
            row.route_id ?? '',
          ],
          empty: 'No email received.',
        }),
      );
      return 0;
    },
  },
];
