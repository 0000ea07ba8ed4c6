// The commands on projects and their API keys: `projects create|list`, `keys create|list|revoke`, and the
// reputation breaker's `reputation show|resume`.
import type { KeyPermission } from '../db/schema.ts';
import { invalidParam } from '../lib/errors.ts';
import { KEY_PERMISSIONS } from '../modules/projects/projects.service.ts';
import { type Command, type Context, json, listing } from './command.ts';

const projectsOf = async (context: Context) => (await context.services()).projects;

export const projectCommands: Command[] = [
  {
    words: ['projects', 'create'],
    args: ['name'],
    async run(context, _values, [name]) {
      const project = await (await projectsOf(context)).createProject(name!);
      context.io.stdout.write(`Created project '${project.name}'. Its id:\n${project.id}\n`);
      return 0;
    },
  },
  {
    words: ['projects', 'list'],
    options: json,
    async run(context, values) {
      const projects = await (await projectsOf(context)).listProjects();
      const rows = projects.map((project) => ({
        id: project.id,
        name: project.name,
        default: project.isDefault,
        created_at: project.createdAt,
      }));
      context.io.stdout.write(
        listing(values, rows, {
          headers: ['ID', 'NAME', 'DEFAULT', 'CREATED'],
          cells: (row) => [row.id, row.name, row.default ? 'yes' : '', row.created_at],
          empty: 'No projects yet.',
        }),
      );
      return 0;
    },
  },
  {
    words: ['keys', 'create'],
    options: {
      project: { type: 'string' },
      name: { type: 'string' },
      permission: { type: 'string' },
      domain: { type: 'string' },
    },
    required: ['project'],
    async run(context, values) {
      const projectId = values.project as string;
      const name = typeof values.name === 'string' ? values.name : null;
      const permission = values.permission as string | undefined;
      if (permission !== undefined && !(KEY_PERMISSIONS as readonly string[]).includes(permission)) {
        throw invalidParam('permission', `--permission must be one of: ${KEY_PERMISSIONS.join(', ')}.`);
      }
      const { key, plaintext } = await (
        await projectsOf(context)
      ).createKey(projectId, {
        name,
        permission: permission as KeyPermission | undefined,
        domainId: (values.domain as string | undefined) ?? null,
      });
      const scope = `${key.permission}${key.domainId ? ` on domain ${key.domainId}` : ''}`;
      context.io.stdout.write(
        `Created ${scope} key ${key.id}${name ? ` '${name}'` : ''} for project ${projectId}.\n` +
          'Store it now: it is shown only this once, and only its hash is kept.\n' +
          `${plaintext}\n`,
      );
      return 0;
    },
  },
  {
    words: ['keys', 'list'],
    options: { project: { type: 'string' }, ...json },
    required: ['project'],
    async run(context, values) {
      const keys = await (await projectsOf(context)).listKeys(values.project as string);
      // Only what identifies a key: the secret and its hash never leave the database.
      const rows = keys.map((key) => ({
        id: key.id,
        name: key.name,
        prefix: key.keyPrefix,
        permission: key.permission,
        domain_id: key.domainId,
        created_at: key.createdAt,
        revoked_at: key.revokedAt,
      }));
      context.io.stdout.write(
        listing(values, rows, {
          headers: ['ID', 'NAME', 'PREFIX', 'PERMISSION', 'DOMAIN', 'CREATED', 'REVOKED'],
          cells: (row) => [
            row.id,
            row.name ?? '',
            `${row.prefix}…`,
            row.permission,
            row.domain_id ?? '',
            row.created_at,
            row.revoked_at ?? '',
          ],
          empty: 'No keys in this project.',
        }),
      );
      return 0;
    },
  },
  {
    words: ['reputation', 'show'],
    options: { project: { type: 'string' }, ...json },
    required: ['project'],
    async run(context, values) {
      const view = await (await context.services()).reputation.view(values.project as string);
      const rate = (value: number | null) => (value === null ? '-' : `${(value * 100).toFixed(2)} %`);
      context.io.stdout.write(
        values.json === true
          ? `${JSON.stringify(view, null, 2)}\n`
          : listing(values, [view.project, ...view.domains], {
              headers: [
                'SCOPE',
                'STATE',
                'HOLDS',
                'SENT',
                'HARD BOUNCES',
                'COMPLAINTS',
                'BOUNCE RATE',
                'COMPLAINT RATE',
              ],
              cells: (row) => [
                row.domain ?? '(project)',
                row.state,
                row.holds,
                String(row.sent),
                String(row.bounced_hard),
                String(row.complained),
                rate(row.hard_bounce_rate),
                rate(row.complaint_rate),
              ],
              empty: '',
            }),
      );
      return 0;
    },
  },
  {
    words: ['reputation', 'resume'],
    options: { project: { type: 'string' }, domain: { type: 'string' } },
    required: ['project'],
    async run(context, values) {
      const resumed = await (
        await context.services()
      ).reputation.resumeAsOperator(values.project as string, values.domain as string | undefined);
      const names = resumed.map((scope) => scope ?? 'the project');
      context.io.stdout.write(`Resumed sending for ${names.join(', ')}.\n`);
      return 0;
    },
  },
  {
    words: ['keys', 'revoke'],
    args: ['key-id'],
    async run(context, _values, [keyId]) {
      const key = await (await projectsOf(context)).revokeKeyAsOperator(keyId!);
      context.io.stdout.write(
        `Revoked key ${key.id}${key.name ? ` '${key.name}'` : ''} (at ${key.revokedAt}).\n`,
      );
      return 0;
    },
  },
];
