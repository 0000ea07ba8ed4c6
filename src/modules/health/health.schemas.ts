import { type Static, Type } from '@sinclair/typebox';

export const Liveness = Type.Object(
  { status: Type.Literal('ok', { description: 'Always `ok`: the process answers HTTP.' }) },
  { title: 'Liveness' },
);

export const ReadinessCheck = Type.Object(
  {
    name: Type.Union([Type.Literal('database'), Type.Literal('migrations'), Type.Literal('workers')], {
      description:
        "`database`: a query answered within READINESS_TIMEOUT; `migrations`: the applied migrations are exactly this version's; `workers`: every queue worker of this process recorded a heartbeat recently (present only where the process runs workers).",
    }),
    status: Type.Union([Type.Literal('pass'), Type.Literal('fail')]),
    detail: Type.String({ description: 'What was found, for a person.' }),
  },
  { title: 'ReadinessCheck' },
);
export type ReadinessCheck = Static<typeof ReadinessCheck>;

export const Readiness = Type.Object(
  {
    status: Type.Union([Type.Literal('ready'), Type.Literal('not_ready')], {
      description: '`ready` when every check passes.',
    }),
    checks: Type.Array(ReadinessCheck),
  },
  { title: 'Readiness' },
);
export type ReadinessView = Static<typeof Readiness>;
