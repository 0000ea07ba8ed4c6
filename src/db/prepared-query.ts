import { type Compilable, type CompiledQuery, createQueryId, type Kysely } from 'kysely';
import type { Database } from './schema.ts';

/** Marks where an argument of a prepared query lands in the compiled query's parameters. */
class StandIn {
  readonly index: number;
  constructor(index: number) {
    this.index = index;
  }
}

/**
 * A query built and compiled once, then run with new values: for the few queries every request makes
 * (the key lookup, the webhook list), Kysely's building and compiling cost about as much as running them.
 * `build` is called once, with stand-ins for its arguments, so it must only pass them into the query as
 * values, never branch on them; each call then puts its arguments where the stand-ins were.
 */
export function prepareQuery<Args extends unknown[], Row>(
  db: Kysely<Database>,
  build: (...args: Args) => Compilable<Row>,
): (...args: Args) => Promise<Row[]> {
  let compiled: { query: CompiledQuery<Row>; slots: (number | undefined)[] } | undefined;
  const compile = (arity: number) => {
    const query = build(
      ...(Array.from({ length: arity }, (_, index) => new StandIn(index)) as Args),
    ).compile();
    const slots = query.parameters.map((value) => (value instanceof StandIn ? value.index : undefined));
    for (let index = 0; index < arity; index++) {
      if (!slots.includes(index)) throw new Error(`prepareQuery: argument ${index} is not a query value.`);
    }
    return { query, slots };
  };
  return async (...args) => {
    compiled ??= compile(args.length);
    const { query, slots } = compiled;
    const parameters = query.parameters.map((value, i) => {
      const slot = slots[i];
      return slot === undefined ? value : args[slot];
    });
    const { rows } = await db.executeQuery<Row>({ ...query, parameters, queryId: createQueryId() });
    return rows;
  };
}
