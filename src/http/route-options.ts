import type { FastifyContextConfig, FastifySchema } from 'fastify';
import type { KeyPermission } from '../db/schema.ts';

/** What a route's `config` may say besides its permission: a body it may go without, no transaction, … */
type MoreConfig = Omit<FastifyContextConfig, 'permission'>;

/**
 * The options of a module's /v1 routes, one function per key permission: the permission the route needs
 * (checked by src/http/auth.ts) in its `config`, the module's tags in its schema (its section of the OpenAPI
 * document). A route states what it needs in one word, and the tags are written once per module. `shared`:
 * schema every one of these routes has (the `params` of the resource they all sit on), written once too.
 */
export function routeOptions<Shared extends FastifySchema = Record<never, never>>(
  tags: string[],
  shared?: Shared,
) {
  const needing =
    (permission: KeyPermission) =>
    <S extends FastifySchema>(schema: S, config: MoreConfig = {}) => ({
      config: { permission, ...config },
      schema: { tags, ...(shared as Shared), ...schema },
    });
  return {
    readOnly: needing('read_only'),
    fullAccess: needing('full_access'),
    sendingAccess: needing('sending_access'),
  };
}
