/** The keys of a webhook as the API returns it: the seed's fields exactly, plus `disabled_reason` and `failing_since`. */
export const WEBHOOK_KEYS: readonly string[] = [
  'id',
  'url',
  'enabled',
  'events',
  'format',
  'created_at',
  'updated_at',
  'has_secret',
  'disabled_reason',
  'failing_since',
];
