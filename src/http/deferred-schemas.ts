import type { FastifyInstance, FastifySchemaValidationError, FastifyServerOptions } from 'fastify';

/**
 * A route's validators and response serializers are compiled on its first use, not at boot: Fastify compiles
 * every route's schemas before it listens, about half of a start's CPU, most of it for routes a process never
 * serves (bench/README.md, "Start time and the suite"). A route's first request pays for its own.
 * `compileDeferredSchemas` compiles all of an app's at once: the test that keeps a schema that does not
 * compile failing the suite, as it failed the start.
 */
type BuildSerializer = NonNullable<
  NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>['buildSerializer']
>;

export interface DeferredSchemas {
  /** For the server options' `schemaController.compilersFactory`: the given factory's, compiled on first use. */
  buildSerializer: BuildSerializer;
  /** A validator compiled on its first call: Ajv's, or one that sets `errors` as Ajv's do. */
  validator(where: string, compile: () => Validator): Validator;
}

type Validator = ((data: unknown) => boolean) & { errors?: FastifySchemaValidationError[] | null };

interface Pending {
  /** Where the schema is used (`POST /v1/emails body`, `GET /v1/webhooks 200`), for a compile error. */
  where: string;
  compile(): void;
}

const pendingByApp = new WeakMap<FastifyInstance, Pending[]>();

/**
 * The deferred schemas of one app, its serializers made by `build` (serialization.ts); `attach` it to the app
 * once made, for `compileDeferredSchemas`.
 */
export function createDeferredSchemas(
  build: BuildSerializer,
): DeferredSchemas & { attach(app: FastifyInstance): void } {
  const pending: Pending[] = [];
  return {
    attach: (app) => void pendingByApp.set(app, pending),
    buildSerializer(externalSchemas, serializerOptions) {
      const compile = build(externalSchemas, serializerOptions);
      return (route: { method: string; url: string; httpStatus: string; contentType?: string }) => {
        let serialize: ((data: unknown) => string) | undefined;
        const ensure = () => (serialize ??= compile(route as never));
        const where = [route.method, route.url, route.httpStatus, route.contentType]
          .filter(Boolean)
          .join(' ');
        pending.push({ where, compile: ensure });
        return (data: unknown) => ensure()(data);
      };
    },
    validator(where, compile) {
      let compiled: Validator | undefined;
      const ensure = () => (compiled ??= compile());
      pending.push({ where, compile: ensure });
      // Fastify reads a failed validation's errors from the function it called: copied from the compiled one.
      const validate: Validator = (data) => {
        const valid = ensure()(data);
        validate.errors = compiled!.errors ?? null;
        return valid;
      };
      validate.errors = null;
      return validate;
    },
  };
}

/**
 * Compiles every schema `app`'s routes deferred (Fastify hands them over when the app is made ready), and
 * says how many; throws naming the route and part of the first that does not compile.
 */
export async function compileDeferredSchemas(app: FastifyInstance): Promise<number> {
  await app.ready();
  const pending = pendingByApp.get(app);
  if (!pending) throw new Error('This app does not defer its schemas (createDeferredSchemas)');
  for (const { where, compile } of pending) {
    try {
      compile();
    } catch (error) {
      throw new Error(`The schema of ${where} does not compile: ${(error as Error).message}`, {
        cause: error,
      });
    }
  }
  return pending.length;
}
