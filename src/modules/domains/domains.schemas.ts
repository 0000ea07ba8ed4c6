import { type Static, Type } from '@sinclair/typebox';
import { listEnvelope } from '../../http/list.ts';
import { nullable, timestamp } from '../../http/schema-helpers.ts';

const status = Type.Union([Type.Literal('pending'), Type.Literal('verified'), Type.Literal('failed')], {
  description:
    '`pending` (records not published yet), `verified` (DKIM, and the return path when there is one, match) or `failed` (a record holds another value, or a verified domain stopped matching).',
});

export const DomainRecordView = Type.Object(
  {
    purpose: Type.Union(
      [
        Type.Literal('challenge'),
        Type.Literal('dkim'),
        Type.Literal('return_path'),
        Type.Literal('receiving'),
        Type.Literal('dmarc'),
      ],
      {
        description:
          "`challenge` (this project's token, listed only while another project holds the name or a parent of it; publish it, as the one `postwire-verification=` value at that name, to take the name over), `dkim` (the signing key), `return_path` (MX and SPF of the bounce subdomain), `receiving` (the domain's own MX, at the inbound listener, when it receives mail; it decides `receiving_verified`, not the status) or `dmarc` (a suggested policy).",
      },
    ),
    type: Type.Union([Type.Literal('TXT'), Type.Literal('MX')]),
    name: Type.String({ description: 'The name to publish the record at (fully qualified).' }),
    value: Type.String({ description: 'The value to publish.' }),
    priority: Type.Optional(Type.Integer({ description: 'The MX preference to publish.' })),
    required: Type.Boolean({
      description: 'Whether the domain needs it to be verified (DMARC is a suggestion).',
    }),
    status: Type.Union([Type.Literal('pending'), Type.Literal('verified'), Type.Literal('failed')], {
      description:
        '`pending` (not found, or not looked up yet), `verified` (found and matches), `failed` (found with another value).',
    }),
    found: Type.Optional(
      nullable(
        Type.Array(Type.String()),
        'What the last lookup found (MX as `priority host`); null: nothing. Absent before the first lookup.',
      ),
    ),
    matches: Type.Optional(
      Type.Boolean({ description: 'Whether what was found matches; absent before the first lookup.' }),
    ),
    error: Type.Optional(
      Type.String({
        description:
          'The DNS error when the last lookup failed for another reason than a missing record (`ESERVFAIL`, `ETIMEOUT`): such a lookup changes no status.',
      }),
    ),
    rotation: Type.Optional(
      Type.Union([Type.Literal('retiring'), Type.Literal('next')], {
        description:
          'During a DKIM key rotation: `retiring` is the key that still signs, `next` the new one, which signs once its record verifies.',
      }),
    ),
  },
  { title: 'DomainRecord' },
);
export type DomainRecordViewType = Static<typeof DomainRecordView>;

export const ComplianceCheckView = Type.Object(
  {
    check: Type.Union(
      [
        'spf',
        'spf_lookups',
        'spf_sending_host',
        'dkim_key',
        'dmarc',
        'dmarc_reports',
        'reverse_dns',
        'helo',
        'tls',
        'list_unsubscribe',
      ].map((id) => Type.Literal(id)),
      {
        description:
          'What is checked: `spf` (one SPF record at the envelope domain), `spf_lookups` (its DNS lookups, through includes, at most 10), `spf_sending_host` (it authorizes the addresses of MAIL_HOSTNAME, direct mode), `dkim_key` (the signing key is 2048 bits or more), `dmarc` (a policy, and which), `dmarc_reports` (its `rua` names `dmarc@<BOUNCE_DOMAIN>`), `reverse_dns` and `helo` (direct mode: each address of MAIL_HOSTNAME has a PTR resolving back to it, and HELO is that name), `tls` (how mail leaves), `list_unsubscribe` (one-click unsubscribe on bulk mail).',
      },
    ),
    status: Type.Union([Type.Literal('pass'), Type.Literal('warn'), Type.Literal('fail')]),
    reason: Type.String({ description: 'Why, in one sentence.' }),
  },
  { title: 'DomainComplianceCheck' },
);

export const Domain = Type.Object(
  {
    object: Type.Literal('domain'),
    id: Type.String({ description: 'Domain identifier (`dom_…`).' }),
    name: Type.String({
      description: 'The domain, lowercase ASCII (an internationalized name in punycode).',
    }),
    status,
    dkim_selector: Type.String({ description: 'The selector of the key that signs now.' }),
    return_path_domain: nullable(
      Type.String(),
      'The envelope-sender domain for this domain (`bounces.<name>`) when per-recipient return paths are on; null otherwise.',
    ),
    return_path_verified: Type.Boolean({ description: 'Whether its MX (and SPF) records match.' }),
    challenge_required: Type.Boolean({
      description:
        "Another project holds this name, or a domain it is under, verified: this one verifies only with its `challenge` record published too, and then takes the name over (the other project's domain of the same name becomes `failed`; a parent stays with its holder). False once verified.",
    }),
    receiving: Type.Boolean({
      description:
        'Whether it receives mail (inbound routes): its `receiving` MX record is then listed. Change it with PATCH.',
    }),
    receiving_verified: Type.Boolean({
      description:
        'Whether its MX points at the inbound listener, as the last check found: only then, and with the domain verified, do its routes take mail.',
    }),
    dmarc_reports: Type.Boolean({
      description:
        'Whether DMARC aggregate reports mailed to `dmarc@<name>` are read into this project (besides `dmarc@<BOUNCE_DOMAIN>`). Change it with PATCH.',
    }),
    verified_without_dns: nullable(
      Type.String(),
      'Set when this server takes its records as published without looking DNS up, saying why: a server in capture mode (nothing leaves it) with TEST_DOMAINS_WITHOUT_DNS, and a name under `.test`, `.example` or `.localhost`. Null: DNS decides.',
    ),
    records: Type.Array(DomainRecordView, {
      description: 'The DNS records to publish, with what was found.',
    }),
    compliance: nullable(
      Type.Array(ComplianceCheckView),
      'What the large receivers check of a sender, as the last check found it (a preflight before the first send): each check with `pass`, `warn` or `fail` and why. Null before the first check, and for a domain whose records count as published without DNS.',
    ),
    last_checked_at: nullable(timestamp('When its records were last looked up.')),
    verified_at: nullable(timestamp('When it last became verified.')),
    created_at: timestamp('When it was added.'),
    updated_at: timestamp('When it last changed.'),
  },
  { title: 'Domain' },
);
export type DomainView = Static<typeof Domain>;

export const DomainList = listEnvelope(Domain);

const receiving = Type.Boolean({
  description:
    'Receive mail for this domain through inbound routes: its records then include an MX at the inbound listener (INBOUND_MX_HOST; 422 `receiving_unavailable` when the operator has not set one). Defaults to false.',
});

export const CreateDomainBody = Type.Object(
  {
    name: Type.String({
      minLength: 1,
      maxLength: 1024,
      description:
        'The domain to send from, `acme.example` (or a subdomain, `mail.acme.example`). Unicode names are stored in punycode; one trailing dot is dropped. At most 253 characters. Other projects may add the same name: the first to verify it holds it.',
    }),
    receiving: Type.Optional(receiving),
  },
  { additionalProperties: false, title: 'CreateDomainRequest' },
);
export type CreateDomainInput = Static<typeof CreateDomainBody>;

const dmarcReports = Type.Boolean({
  description:
    "Read the DMARC aggregate reports mailed to `dmarc@<name>`: the inbound listener takes that address (from an inbound route that would), and what arrives there is stored as reports about this project's domains (GET /v1/domains/{id}/dmarc). Name it in the policy's `rua=` (the `dmarc_reports` check passes with it). Its MX must point at the inbound listener. Defaults to false.",
});

export const UpdateDomainBody = Type.Object(
  { receiving: Type.Optional(receiving), dmarc_reports: Type.Optional(dmarcReports) },
  { additionalProperties: false, title: 'UpdateDomainRequest' },
);
export type UpdateDomainInput = Static<typeof UpdateDomainBody>;

export const DomainParams = Type.Object({
  id: Type.String({ description: 'The domain id (`dom_…`) or its name.' }),
});

export const DomainIdParams = Type.Object({
  id: Type.String({ description: 'The domain id (`dom_…`).' }),
});

export const DeletedDomain = Type.Object(
  { object: Type.Literal('domain'), id: Type.String(), deleted: Type.Literal(true) },
  { title: 'DeletedDomain' },
);
