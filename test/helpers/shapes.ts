/** The keys of a webhook as the API returns it: the seed's fields exactly, plus `disabled_reason`. */
export const WEBHOOK_KEYS: readonly string[] = [
  'id',
  'url',
  'enabled',
  'events',
  'created_at',
  'updated_at',
  'has_secret',
  'disabled_reason',
];
