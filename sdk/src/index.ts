// @postwire/sdk: a typed client for the Postwire API, generated from its OpenAPI document, and the check
// for the signed webhooks it sends.
export { Postwire, type PostwireOptions, type RequestOptions } from './client.ts';
export {
  AuthenticationError,
  ConflictError,
  ConnectionError,
  InvalidRequestError,
  NotFoundError,
  PermissionError,
  PostwireError,
  RateLimitError,
  ServerError,
  ValidationError,
} from './errors.ts';
export {
  verifyWebhook,
  type WebhookEvent,
  type WebhookEventOf,
  WebhookVerificationError,
} from './webhooks.ts';
export type { components, operations, paths, webhooks } from './generated/openapi.ts';

import type { components } from './generated/openapi.ts';
type Schemas = components['schemas'];
export type Email = Schemas['Email'];
export type EventType = Schemas['EventType'];
export type Event = Schemas['Event'];
export type Template = Schemas['Template'];
export type Webhook = Schemas['Webhook'];
export type Suppression = Schemas['Suppression'];
export type Contact = Schemas['Contact'];
export type ContactProperty = Schemas['ContactProperty'];
export type SendEmailRequest = Schemas['SendEmail'];
