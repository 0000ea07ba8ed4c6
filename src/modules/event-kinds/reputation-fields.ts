import { type ObjectOptions, Type } from '@sinclair/typebox';

/**
 * The reputation window, thresholds and minimum volumes as configured (REPUTATION_*), defined once: GET
 * /v1/reputation (src/modules/reputation/reputation.schemas.ts) and the `project.*` payloads (event-payloads.ts)
 * carry the same object, built by reputation.service.ts's `thresholds()`. Each place gives its own title and
 * description.
 */
export const reputationThresholds = (options: ObjectOptions) =>
  Type.Object(
    {
      window_days: Type.Integer(),
      hard_bounce_warning: Type.Number(),
      hard_bounce_limit: Type.Number(),
      complaint_warning: Type.Number(),
      complaint_limit: Type.Number(),
      min_bounce_volume: Type.Integer(),
      min_complaint_volume: Type.Integer(),
    },
    options,
  );
