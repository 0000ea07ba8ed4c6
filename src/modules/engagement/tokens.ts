import { timingSafeEqual } from 'node:crypto';
import type { SecretBox } from '../../lib/crypto.ts';
import { isId } from '../../lib/ids.ts';

// Opaque per-recipient tokens for the public routes: the recipient id's suffix (26 base32 characters), for a
// click the link's index (2 base32 characters: up to 1024 tracked links), then an 80-bit tag, an HMAC under
// the server key with a purpose of its own per kind. Checking one needs no database: an unknown, altered or
// made-up token fails the tag, so the routes answer 404 without a query. A token made for an open does not
// verify as a click or an unsubscribe.

export type TokenKind = 'open' | 'click' | 'unsubscribe';

const BASE32 = '0123456789abcdefghjkmnpqrstvwxyz';
const TAG_LENGTH = 16;
const ID_LENGTH = 26;
// Two characters name any of an email's MAX_TRACKED_LINKS links (emails/tracked-html.ts).
const INDEX_LENGTH = 2;

const base32 = (bytes: Buffer, length: number): string => {
  let out = '';
  for (let index = 0; out.length < length; index++) out += BASE32[bytes[index]! & 31];
  return out;
};

const encodeIndex = (index: number): string => BASE32[index >> 5]! + BASE32[index & 31]!;
const decodeIndex = (text: string): number => BASE32.indexOf(text[0]!) * 32 + BASE32.indexOf(text[1]!);

const SHAPE: Record<TokenKind, RegExp> = {
  open: new RegExp(`^[0-9a-hjkmnp-tv-z]{${ID_LENGTH + TAG_LENGTH}}$`),
  click: new RegExp(`^[0-9a-hjkmnp-tv-z]{${ID_LENGTH + INDEX_LENGTH + TAG_LENGTH}}$`),
  unsubscribe: new RegExp(`^[0-9a-hjkmnp-tv-z]{${ID_LENGTH + TAG_LENGTH}}$`),
};

export interface TokenRef {
  recipientId: string;
  /** For a click: the index of the link among the email's tracked links. */
  index: number;
}

export interface EngagementTokens {
  make(kind: TokenKind, recipientId: string, index?: number): string;
  /** The recipient (and link) a token names, if it verifies; else undefined. */
  read(kind: TokenKind, token: string): TokenRef | undefined;
}

export function createEngagementTokens(secretBox: SecretBox): EngagementTokens {
  const tagOf = (kind: TokenKind, recipientId: string, index: number) =>
    base32(secretBox.mac(`engagement ${kind}`, `${recipientId}:${index}`), TAG_LENGTH);
  return {
    make(kind, recipientId, index = 0) {
      const suffix = recipientId.slice('rcpt_'.length);
      return `${suffix}${kind === 'click' ? encodeIndex(index) : ''}${tagOf(kind, recipientId, index)}`;
    },
    read(kind, token) {
      if (typeof token !== 'string' || !SHAPE[kind].test(token)) return undefined;
      const recipientId = `rcpt_${token.slice(0, ID_LENGTH)}`;
      if (!isId('rcpt', recipientId)) return undefined;
      const index = kind === 'click' ? decodeIndex(token.slice(ID_LENGTH, ID_LENGTH + INDEX_LENGTH)) : 0;
      const expected = Buffer.from(tagOf(kind, recipientId, index));
      const given = Buffer.from(token.slice(-TAG_LENGTH));
      return timingSafeEqual(expected, given) ? { recipientId, index } : undefined;
    },
  };
}

/**
 * How long a preference link works: it is made when a broadcast's copy is, so a link in an old newsletter
 * stops working a year on (the page says so, and the newest email carries a fresh one). Each copy's own
 * one-click unsubscribe works as long as its email is kept.
 */
export const PREFERENCE_LINK_DAYS = 365;
const DAY_MS = 86_400_000;
const DAY_LENGTH = 4;
const PREFERENCE_SHAPE = new RegExp(`^[0-9a-hjkmnp-tv-z]{${ID_LENGTH + DAY_LENGTH + TAG_LENGTH}}$`);

/** What a preference token names: a contact, or nobody (undefined), or a contact whose link ran out. */
export type PreferenceRef = { contactId: string; expired: boolean } | undefined;

export interface PreferenceTokens {
  /** A contact's preference token, made on the day of `at`. */
  make(contactId: string, at: Date): string;
  read(token: string, now: Date): PreferenceRef;
}

/**
 * Per-contact tokens for the preference page: the contact id's suffix, the day it was made (4 base32
 * characters: days since 1970) and an 80-bit tag over both, under a purpose of its own (a recipient's
 * token never verifies as one). The day is signed, so a link cannot be made younger.
 */
export function createPreferenceTokens(secretBox: SecretBox): PreferenceTokens {
  const tagOf = (contactId: string, day: string) =>
    base32(secretBox.mac('engagement preferences', `${contactId}:${day}`), TAG_LENGTH);
  return {
    make(contactId, at) {
      const days = Math.floor(at.getTime() / DAY_MS);
      const day = encodeIndex(days >> 10) + encodeIndex(days & 1023);
      return `${contactId.slice('con_'.length)}${day}${tagOf(contactId, day)}`;
    },
    read(token, now) {
      if (typeof token !== 'string' || !PREFERENCE_SHAPE.test(token)) return undefined;
      const contactId = `con_${token.slice(0, ID_LENGTH)}`;
      if (!isId('con', contactId)) return undefined;
      const day = token.slice(ID_LENGTH, ID_LENGTH + DAY_LENGTH);
      const expected = Buffer.from(tagOf(contactId, day));
      if (!timingSafeEqual(expected, Buffer.from(token.slice(-TAG_LENGTH)))) return undefined;
      const made = decodeIndex(day.slice(0, 2)) * 1024 + decodeIndex(day.slice(2));
      return { contactId, expired: Math.floor(now.getTime() / DAY_MS) - made > PREFERENCE_LINK_DAYS };
    },
  };
}

/** Where the preference page lives under PUBLIC_URL (its token after it). */
export const PREFERENCES_PATH = '/p';

/** A contact's preference page URL, made now. */
export const preferenceUrl = (publicUrl: string, tokens: PreferenceTokens, contactId: string, at: Date) =>
  `${publicUrl}${PREFERENCES_PATH}/${tokens.make(contactId, at)}`;

/** Where each public route lives under PUBLIC_URL. */
export const PUBLIC_PATHS: Record<TokenKind, string> = { open: '/o', click: '/c', unsubscribe: '/u' };

export interface EngagementLinks {
  tokens: EngagementTokens;
  url(kind: TokenKind, recipientId: string, index?: number): string;
  /** `unsubscribe+<token>@BOUNCE_DOMAIN`, when a bounce domain routes mail back to Postwire. */
  mailto(recipientId: string): string | undefined;
}

export function createEngagementLinks(options: {
  publicUrl: string;
  secretBox: SecretBox;
  bounceDomain?: string | undefined;
}): EngagementLinks {
  const tokens = createEngagementTokens(options.secretBox);
  return {
    tokens,
    url: (kind, recipientId, index) =>
      `${options.publicUrl}${PUBLIC_PATHS[kind]}/${tokens.make(kind, recipientId, index)}`,
    mailto: (recipientId) =>
      options.bounceDomain
        ? `mailto:unsubscribe+${tokens.make('unsubscribe', recipientId)}@${options.bounceDomain}?subject=unsubscribe`
        : undefined,
  };
}

/** The recipient an `unsubscribe+<token>@BOUNCE_DOMAIN` address names (for the inbound listener), if any. */
export function unsubscribeAddressRecipient(
  tokens: EngagementTokens,
  address: string,
  bounceDomain: string,
): string | undefined {
  const match = /^unsubscribe\+([0-9a-z]+)@(.+)$/.exec(address.toLowerCase());
  if (!match || match[2] !== bounceDomain.toLowerCase()) return undefined;
  return tokens.read('unsubscribe', match[1]!)?.recipientId;
}
