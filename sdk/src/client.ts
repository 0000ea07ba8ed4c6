import createClient from 'openapi-fetch';
import { ConnectionError, errorFor } from './errors.ts';
import type { components, paths } from './generated/openapi.ts';

type Schemas = components['schemas'];
type Query<Path extends keyof paths> = paths[Path] extends { get: { parameters: { query?: infer Q } } }
  ? NonNullable<Q>
  : never;

export interface PostwireOptions {
  /** Where the API is, without `/v1`: `http://127.0.0.1:3000` (the default) or your deployment's URL. */
  baseUrl?: string;
  /** How many times a request that may safely be repeated is retried (default 2); see README. */
  maxRetries?: number;
  /** A fetch to use instead of the global one (tests, proxies, instrumentation). */
  fetch?: typeof fetch;
  /** Headers sent with every request. */
  headers?: Record<string, string>;
}

export interface RequestOptions {
  /** Cancels the request (and its retries). */
  signal?: AbortSignal;
  /** Retry-safe POST: the same key and body within 24 h answers the first response again. */
  idempotencyKey?: string;
}

const DEFAULT_BASE_URL = 'http://127.0.0.1:3000';
const RETRY_STATUSES = new Set([429, 502, 503, 504]);
const MAX_RETRY_WAIT_MS = 30_000;

/**
 * The Postwire API: `new Postwire(apiKey, { baseUrl })`. Each method is one operation of the OpenAPI
 * document, with its types; an error answer throws the matching `PostwireError` subclass.
 */
export class Postwire {
  readonly emails;
  readonly templates;
  readonly webhooks;
  readonly events;
  readonly eventKinds;
  readonly suppressions;
  readonly contacts;
  readonly contactProperties;
  readonly segments;
  readonly topics;
  readonly domains;
  readonly inboundMessages;
  readonly inboundRoutes;
  readonly receivedEmails;
  readonly apiKeys;

  constructor(apiKey: string, options: PostwireOptions = {}) {
    if (!apiKey) throw new TypeError('Postwire needs an API key: new Postwire(apiKey).');
    const client = createClient<paths>({
      baseUrl: (options.baseUrl ?? DEFAULT_BASE_URL).replace(/\/+$/, ''),
      headers: { ...options.headers, authorization: `Bearer ${apiKey}` },
      fetch: retrying(options.fetch ?? globalThis.fetch, options.maxRetries ?? 2),
    });

    /** The body of a success, or the typed error of any other answer. */
    async function call<T>(
      pending: Promise<{ data?: T; error?: unknown; response: Response }>,
    ): Promise<NonNullable<T>> {
      const { data, error, response } = await pending;
      if (!response.ok) throw errorFor(response, error);
      return data as NonNullable<T>;
    }
    const init = (options: RequestOptions | undefined, idempotent = false) => {
      const key = options?.idempotencyKey ?? (idempotent ? crypto.randomUUID() : undefined);
      return {
        ...(options?.signal ? { signal: options.signal } : {}),
        headers: key === undefined ? {} : { 'idempotency-key': key },
      };
    };

    this.emails = {
      /**
       * Sends an email (202: accepted, delivered in the background). An `Idempotency-Key` is added when
       * none is given, so a retry after a lost answer never sends twice.
       */
      send: (body: Schemas['SendEmail'], options?: RequestOptions) =>
        call(client.POST('/v1/emails', { body, ...init(options, true) })),
      /** Sends up to 100 emails, accepted or refused together; idempotent like `send`. */
      sendBatch: (body: Schemas['SendEmailBatch'], options?: RequestOptions) =>
        call(client.POST('/v1/emails/batch', { body, ...init(options, true) })),
      get: (id: string, options?: RequestOptions) =>
        call(client.GET('/v1/emails/{id}', { params: { path: { id } }, ...init(options) })),
      list: (query: Query<'/v1/emails'> = {}, options?: RequestOptions) =>
        call(client.GET('/v1/emails', { params: { query }, ...init(options) })),
      /** Moves a scheduled email that has not started sending to a new `scheduled_at`. */
      reschedule: (id: string, body: Schemas['RescheduleEmail'], options?: RequestOptions) =>
        call(client.PATCH('/v1/emails/{id}', { params: { path: { id } }, body, ...init(options) })),
      /** Cancels a scheduled email that has not started sending. */
      cancel: (id: string, options?: RequestOptions) =>
        call(client.POST('/v1/emails/{id}/cancel', { params: { path: { id } }, ...init(options) })),
      /** The MIME of an email kept by the capture transport. */
      raw: (id: string, options?: RequestOptions) =>
        call(client.GET('/v1/emails/{id}/raw', { params: { path: { id } }, ...init(options) })),
    };

    this.templates = {
      create: (body: Schemas['CreateTemplateRequest'], options?: RequestOptions) =>
        call(client.POST('/v1/templates', { body, ...init(options) })),
      /** By id (`tpl_…`) or alias. */
      get: (id: string, options?: RequestOptions) =>
        call(client.GET('/v1/templates/{id}', { params: { path: { id } }, ...init(options) })),
      list: (query: Query<'/v1/templates'> = {}, options?: RequestOptions) =>
        call(client.GET('/v1/templates', { params: { query }, ...init(options) })),
      update: (id: string, body: Schemas['UpdateTemplateRequest'], options?: RequestOptions) =>
        call(client.PATCH('/v1/templates/{id}', { params: { path: { id } }, body, ...init(options) })),
      delete: (id: string, options?: RequestOptions) =>
        call(client.DELETE('/v1/templates/{id}', { params: { path: { id } }, ...init(options) })),
      /** Publishes the draft (the fields given replace the draft's first) as the next version. */
      publish: (id: string, body: Schemas['PublishTemplateRequest'] = {}, options?: RequestOptions) =>
        call(client.POST('/v1/templates/{id}/publish', { params: { path: { id } }, body, ...init(options) })),
      /** Renders the draft, or a published `version`, with `variables`: a preview of a send. */
      render: (id: string, body: Schemas['RenderTemplateRequest'] = {}, options?: RequestOptions) =>
        call(client.POST('/v1/templates/{id}/render', { params: { path: { id } }, body, ...init(options) })),
      versions: (id: string, query: Query<'/v1/templates/{id}/versions'> = {}, options?: RequestOptions) =>
        call(
          client.GET('/v1/templates/{id}/versions', { params: { path: { id }, query }, ...init(options) }),
        ),
      version: (id: string, version: number, options?: RequestOptions) =>
        call(
          client.GET('/v1/templates/{id}/versions/{version}', {
            params: { path: { id, version } },
            ...init(options),
          }),
        ),
    };

    const webhook = (webhook_id: string) => ({ path: { webhook_id } });
    this.webhooks = {
      create: (body: Schemas['CreateWebhookRequest'], options?: RequestOptions) =>
        call(client.POST('/v1/webhooks', { body, ...init(options) })),
      list: (query: Query<'/v1/webhooks'> = {}, options?: RequestOptions) =>
        call(client.GET('/v1/webhooks', { params: { query }, ...init(options) })),
      get: (id: string, options?: RequestOptions) =>
        call(client.GET('/v1/webhooks/{webhook_id}', { params: webhook(id), ...init(options) })),
      update: (id: string, body: Schemas['UpdateWebhookRequest'], options?: RequestOptions) =>
        call(client.PATCH('/v1/webhooks/{webhook_id}', { params: webhook(id), body, ...init(options) })),
      delete: (id: string, options?: RequestOptions) =>
        call(client.DELETE('/v1/webhooks/{webhook_id}', { params: webhook(id), ...init(options) })),
      /** Every delivery to the webhook, each with its attempts. */
      deliveries: (
        id: string,
        query: Query<'/v1/webhooks/{webhook_id}/deliveries'> = {},
        options?: RequestOptions,
      ) =>
        call(
          client.GET('/v1/webhooks/{webhook_id}/deliveries', {
            params: { ...webhook(id), query },
            ...init(options),
          }),
        ),
      /** Sends a sample event of `type` to this webhook and answers with the first attempt's outcome. */
      test: (id: string, body: Schemas['TestWebhookRequest'] = {}, options?: RequestOptions) =>
        call(client.POST('/v1/webhooks/{webhook_id}/test', { params: webhook(id), body, ...init(options) })),
      /** Re-queues the webhook's failed deliveries created since `since`. */
      recover: (id: string, body: Schemas['RecoverWebhookRequest'], options?: RequestOptions) =>
        call(
          client.POST('/v1/webhooks/{webhook_id}/recover', { params: webhook(id), body, ...init(options) }),
        ),
    };

    this.events = {
      list: (query: Query<'/v1/events'> = {}, options?: RequestOptions) =>
        call(client.GET('/v1/events', { params: { query }, ...init(options) })),
      get: (id: string, options?: RequestOptions) =>
        call(client.GET('/v1/events/{id}', { params: { path: { id } }, ...init(options) })),
      redeliver: (id: string, body: Schemas['RedeliverEventRequest'] = {}, options?: RequestOptions) =>
        call(client.POST('/v1/events/{id}/redeliver', { params: { path: { id } }, body, ...init(options) })),
    };

    this.eventKinds = {
      list: (options?: RequestOptions) => call(client.GET('/v1/event-kinds', { ...init(options) })),
    };

    this.suppressions = {
      list: (query: Query<'/v1/suppressions'> = {}, options?: RequestOptions) =>
        call(client.GET('/v1/suppressions', { params: { query }, ...init(options) })),
      /** Adds addresses (reason `manual`); one already suppressed keeps its entry. */
      create: (body: Schemas['CreateSuppressionsRequest'], options?: RequestOptions) =>
        call(client.POST('/v1/suppressions', { body, ...init(options) })),
      get: (address: string, options?: RequestOptions) =>
        call(client.GET('/v1/suppressions/{address}', { params: { path: { address } }, ...init(options) })),
      delete: (address: string, options?: RequestOptions) =>
        call(
          client.DELETE('/v1/suppressions/{address}', { params: { path: { address } }, ...init(options) }),
        ),
    };

    // A contact by id (`con_…`) or address; a property by id (`cprop_…`) or key.
    const contact = (id: string) => ({ path: { id } });
    this.contacts = {
      create: (body: Schemas['CreateContactRequest'], options?: RequestOptions) =>
        call(client.POST('/v1/contacts', { body, ...init(options) })),
      list: (query: Query<'/v1/contacts'> = {}, options?: RequestOptions) =>
        call(client.GET('/v1/contacts', { params: { query }, ...init(options) })),
      get: (id: string, options?: RequestOptions) =>
        call(client.GET('/v1/contacts/{id}', { params: contact(id), ...init(options) })),
      /** Only the fields sent change; in `properties`, only the keys sent (null removes a value). */
      update: (id: string, body: Schemas['UpdateContactRequest'], options?: RequestOptions) =>
        call(client.PATCH('/v1/contacts/{id}', { params: contact(id), body, ...init(options) })),
      delete: (id: string, options?: RequestOptions) =>
        call(client.DELETE('/v1/contacts/{id}', { params: contact(id), ...init(options) })),
    };

    this.contactProperties = {
      create: (body: Schemas['CreateContactPropertyRequest'], options?: RequestOptions) =>
        call(client.POST('/v1/contact-properties', { body, ...init(options) })),
      list: (query: Query<'/v1/contact-properties'> = {}, options?: RequestOptions) =>
        call(client.GET('/v1/contact-properties', { params: { query }, ...init(options) })),
      get: (id: string, options?: RequestOptions) =>
        call(client.GET('/v1/contact-properties/{id}', { params: contact(id), ...init(options) })),
      /** Changes the fallback; key and type stay as declared. */
      update: (id: string, body: Schemas['UpdateContactPropertyRequest'], options?: RequestOptions) =>
        call(client.PATCH('/v1/contact-properties/{id}', { params: contact(id), body, ...init(options) })),
      delete: (id: string, options?: RequestOptions) =>
        call(client.DELETE('/v1/contact-properties/{id}', { params: contact(id), ...init(options) })),
    };

    // A segment or a topic by id; a contact, as above, by id or address.
    const byId = (id: string) => ({ path: { id } });
    this.segments = {
      create: (body: Schemas['CreateSegmentRequest'], options?: RequestOptions) =>
        call(client.POST('/v1/segments', { body, ...init(options) })),
      list: (query: Query<'/v1/segments'> = {}, options?: RequestOptions) =>
        call(client.GET('/v1/segments', { params: { query }, ...init(options) })),
      get: (id: string, options?: RequestOptions) =>
        call(client.GET('/v1/segments/{id}', { params: byId(id), ...init(options) })),
      update: (id: string, body: Schemas['UpdateSegmentRequest'], options?: RequestOptions) =>
        call(client.PATCH('/v1/segments/{id}', { params: byId(id), body, ...init(options) })),
      delete: (id: string, options?: RequestOptions) =>
        call(client.DELETE('/v1/segments/{id}', { params: byId(id), ...init(options) })),
      /** The segment's contacts, newest first (the same as `contacts.list({ segment_id })`). */
      contacts: (id: string, query: Query<'/v1/segments/{id}/contacts'> = {}, options?: RequestOptions) =>
        call(client.GET('/v1/segments/{id}/contacts', { params: { ...byId(id), query }, ...init(options) })),
      /** The segments a contact (by id or address) is in. */
      ofContact: (
        contactId: string,
        query: Query<'/v1/contacts/{id}/segments'> = {},
        options?: RequestOptions,
      ) =>
        call(
          client.GET('/v1/contacts/{id}/segments', {
            params: { ...contact(contactId), query },
            ...init(options),
          }),
        ),
      /** Adding a contact the segment has already changes nothing (`added: false`). */
      addContact: (id: string, contactId: string, options?: RequestOptions) =>
        call(
          client.POST('/v1/contacts/{id}/segments/{segment_id}', {
            params: { path: { id: contactId, segment_id: id } },
            ...init(options),
          }),
        ),
      removeContact: (id: string, contactId: string, options?: RequestOptions) =>
        call(
          client.DELETE('/v1/contacts/{id}/segments/{segment_id}', {
            params: { path: { id: contactId, segment_id: id } },
            ...init(options),
          }),
        ),
    };

    this.topics = {
      create: (body: Schemas['CreateTopicRequest'], options?: RequestOptions) =>
        call(client.POST('/v1/topics', { body, ...init(options) })),
      list: (query: Query<'/v1/topics'> = {}, options?: RequestOptions) =>
        call(client.GET('/v1/topics', { params: { query }, ...init(options) })),
      get: (id: string, options?: RequestOptions) =>
        call(client.GET('/v1/topics/{id}', { params: byId(id), ...init(options) })),
      /** The name or description; the default subscription stays as created. */
      update: (id: string, body: Schemas['UpdateTopicRequest'], options?: RequestOptions) =>
        call(client.PATCH('/v1/topics/{id}', { params: byId(id), body, ...init(options) })),
      delete: (id: string, options?: RequestOptions) =>
        call(client.DELETE('/v1/topics/{id}', { params: byId(id), ...init(options) })),
      /** Every topic with the contact's subscription: its choice, or the topic's default. */
      ofContact: (
        contactId: string,
        query: Query<'/v1/contacts/{id}/topics'> = {},
        options?: RequestOptions,
      ) =>
        call(
          client.GET('/v1/contacts/{id}/topics', {
            params: { ...contact(contactId), query },
            ...init(options),
          }),
        ),
      /** Makes a contact's choices (all or none); topics not named keep theirs. */
      choose: (contactId: string, body: Schemas['UpdateContactTopicsRequest'], options?: RequestOptions) =>
        call(
          client.PATCH('/v1/contacts/{id}/topics', { params: contact(contactId), body, ...init(options) }),
        ),
    };

    this.domains = {
      /** Adds a sending domain; the answer lists the DNS records to publish. */
      create: (body: Schemas['CreateDomainRequest'], options?: RequestOptions) =>
        call(client.POST('/v1/domains', { body, ...init(options) })),
      list: (query: Query<'/v1/domains'> = {}, options?: RequestOptions) =>
        call(client.GET('/v1/domains', { params: { query }, ...init(options) })),
      get: (id: string, options?: RequestOptions) =>
        call(client.GET('/v1/domains/{id}', { params: { path: { id } }, ...init(options) })),
      /** Turns receiving on or off (inbound routes take mail once its MX verifies). */
      update: (id: string, body: Schemas['UpdateDomainRequest'], options?: RequestOptions) =>
        call(client.PATCH('/v1/domains/{id}', { params: { path: { id } }, body, ...init(options) })),
      delete: (id: string, options?: RequestOptions) =>
        call(client.DELETE('/v1/domains/{id}', { params: { path: { id } }, ...init(options) })),
      /** Looks the records up now and answers with what was found. */
      verify: (id: string, options?: RequestOptions) =>
        call(client.POST('/v1/domains/{id}/verify', { params: { path: { id } }, ...init(options) })),
      /** Starts a DKIM key rotation: a next key to publish beside the current one. */
      rotateKey: (id: string, options?: RequestOptions) =>
        call(client.POST('/v1/domains/{id}/dkim/rotate', { params: { path: { id } }, ...init(options) })),
      /** What receivers' DMARC aggregate reports say of mail sent as the domain, over a period. */
      dmarc: (id: string, query: Query<'/v1/domains/{id}/dmarc'> = {}, options?: RequestOptions) =>
        call(client.GET('/v1/domains/{id}/dmarc', { params: { path: { id }, query }, ...init(options) })),
    };

    this.inboundMessages = {
      /** Mail that came back to the return paths: reports, and what each was read as. */
      list: (query: Query<'/v1/inbound-messages'> = {}, options?: RequestOptions) =>
        call(client.GET('/v1/inbound-messages', { params: { query }, ...init(options) })),
      get: (id: string, options?: RequestOptions) =>
        call(client.GET('/v1/inbound-messages/{id}', { params: { path: { id } }, ...init(options) })),
    };

    this.inboundRoutes = {
      /** Which addresses of the project's receiving domains take mail, and what happens to it. */
      create: (body: Schemas['CreateInboundRouteRequest'], options?: RequestOptions) =>
        call(client.POST('/v1/inbound-routes', { body, ...init(options) })),
      list: (query: Query<'/v1/inbound-routes'> = {}, options?: RequestOptions) =>
        call(client.GET('/v1/inbound-routes', { params: { query }, ...init(options) })),
      get: (id: string, options?: RequestOptions) =>
        call(client.GET('/v1/inbound-routes/{id}', { params: { path: { id } }, ...init(options) })),
      update: (id: string, body: Schemas['UpdateInboundRouteRequest'], options?: RequestOptions) =>
        call(client.PATCH('/v1/inbound-routes/{id}', { params: { path: { id } }, body, ...init(options) })),
      delete: (id: string, options?: RequestOptions) =>
        call(client.DELETE('/v1/inbound-routes/{id}', { params: { path: { id } }, ...init(options) })),
    };

    const removeApiKey = (id: string, options?: RequestOptions) =>
      call(client.DELETE('/v1/api-keys/{id}', { params: { path: { id } }, ...init(options) }));
    this.apiKeys = {
      /** A key with a permission (and a sending key's one domain); its `token` is in this answer only. */
      create: (body: Schemas['CreateApiKeyRequest'], options?: RequestOptions) =>
        call(client.POST('/v1/api-keys', { body, ...init(options) })),
      /** The project's keys, revoked ones too; never the keys themselves. */
      list: (options?: RequestOptions) => call(client.GET('/v1/api-keys', { ...init(options) })),
      get: (id: string, options?: RequestOptions) =>
        call(client.GET('/v1/api-keys/{id}', { params: { path: { id } }, ...init(options) })),
      /** The key this client uses: what it may do. */
      current: (options?: RequestOptions) => call(client.GET('/v1/api-keys/current', { ...init(options) })),
      /** Revokes a key: refused from the next request on, everywhere. */
      delete: removeApiKey,
      /** The same as `delete`, by the name Resend's SDK gives it. */
      remove: removeApiKey,
    };

    /** The bytes of a success, or the typed error of any other answer. */
    async function bytes(
      pending: Promise<{ data?: ArrayBuffer; error?: unknown; response: Response }>,
    ): Promise<Uint8Array> {
      const { data, error, response } = await pending;
      if (!response.ok) throw errorFor(response, error);
      return new Uint8Array(data!);
    }

    this.receivedEmails = {
      /** What inbound routes took, newest first (no bodies: get one for them). */
      list: (query: Query<'/v1/received-emails'> = {}, options?: RequestOptions) =>
        call(client.GET('/v1/received-emails', { params: { query }, ...init(options) })),
      get: (id: string, options?: RequestOptions) =>
        call(client.GET('/v1/received-emails/{id}', { params: { path: { id } }, ...init(options) })),
      /** The message exactly as received (message/rfc822). */
      raw: (id: string, options?: RequestOptions) =>
        bytes(
          client.GET('/v1/received-emails/{id}/raw', {
            params: { path: { id } },
            parseAs: 'arrayBuffer',
            ...init(options),
          }),
        ),
      /** One attachment's decoded bytes. */
      attachment: (id: string, index: number, options?: RequestOptions) =>
        bytes(
          client.GET('/v1/received-emails/{id}/attachments/{index}', {
            params: { path: { id, index } },
            parseAs: 'arrayBuffer',
            ...init(options),
          }),
        ),
    };
  }
}

/**
 * A fetch that retries what may safely be repeated: GETs, and POSTs carrying an Idempotency-Key (the
 * server answers a repeat with the first answer). Retried: no answer at all, 429, 502, 503 and 504, after
 * `retry-after` when the server gives one, else 0.5 s, 1 s, 2 s… with jitter.
 */
function retrying(fetchImpl: typeof fetch, maxRetries: number): typeof fetch {
  return async (input, init) => {
    const request = new Request(input, init);
    const safe = request.method === 'GET' || request.headers.has('idempotency-key');
    for (let attempt = 0; ; attempt++) {
      const last = !safe || attempt >= maxRetries;
      let response: Response;
      try {
        response = await fetchImpl(request.clone());
      } catch (error) {
        if (request.signal.aborted) throw error;
        if (last)
          throw new ConnectionError(`No answer from ${new URL(request.url).origin}.`, { cause: error });
        await sleep(backoffMs(attempt), request.signal);
        continue;
      }
      if (last || !RETRY_STATUSES.has(response.status)) return response;
      const retryAfter = Number(response.headers.get('retry-after') ?? Number.NaN);
      await response.body?.cancel();
      await sleep(
        Number.isFinite(retryAfter) ? Math.min(retryAfter * 1000, MAX_RETRY_WAIT_MS) : backoffMs(attempt),
        request.signal,
      );
    }
  };
}

const backoffMs = (attempt: number) => Math.min(500 * 2 ** attempt, 8000) * (0.75 + Math.random() / 2);

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        reject(signal.reason);
      },
      { once: true },
    );
  });
}
