import { timingSafeEqual } from 'node:crypto';
import type { SecretBox } from '../../lib/crypto.ts';
import { isId } from '../../lib/ids.ts';

// VERP: each recipient's message goes out with an envelope sender of its own,
// `bounce+<recipient id><tag>@<BOUNCE_DOMAIN>`, so a report mailed back to it names the recipient. The tag
// is an HMAC of the id under the server's key: a report forged for someone else's message does not verify.

const LOCAL_PREFIX = 'bounce+';
const TAG_LENGTH = 10; // base32 characters: 50 bits
const BASE32 = '0123456789abcdefghjkmnpqrstvwxyz';
const PURPOSE = 'return-path';

const base32 = (bytes: Buffer, length: number): string => {
  let out = '';
  for (let index = 0; out.length < length; index++) out += BASE32[bytes[index]! & 31];
  return out;
};

export interface ReturnPath {
  /**
   * The envelope sender for this recipient (`rcpt_…` id): on BOUNCE_DOMAIN, or on `domain` (a sending
   * domain's verified return path, `bounces.<customer domain>`), with the same local part.
   */
  forRecipient(recipientId: string, domain?: string): string;
  /**
   * The recipient id an address names, if its local part's tag verifies, whatever its domain (BOUNCE_DOMAIN
   * or a customer's return path); else undefined. Whether the domain is one of ours is isBounceDomain's
   * question, and for customer domains the domains module's (isReturnPathDomain).
   */
  recipientOf(address: string): string | undefined;
  /** Whether `domain` is BOUNCE_DOMAIN. */
  isBounceDomain(domain: string): boolean;
  /**
   * Whether an address has the shape of our return paths (`bounce+…@`), whatever its tag: a report sent to
   * one claims to be about a recipient, so one whose tag does not verify is forged or altered, not merely
   * unknown. (The listener takes mail for our domains only; this looks at the local part.)
   */
  isReturnPath(address: string): boolean;
}

/** The return paths the configuration asks for: under BOUNCE_DOMAIN, or none when it is unset. */
export function returnPathFromConfig(
  config: { bounceDomain: string | undefined },
  secretBox: SecretBox,
): ReturnPath | undefined {
  return config.bounceDomain ? createReturnPath({ domain: config.bounceDomain, secretBox }) : undefined;
}

export function createReturnPath({
  domain,
  secretBox,
}: {
  domain: string;
  secretBox: SecretBox;
}): ReturnPath {
  const own = domain.toLowerCase();
  const tagOf = (id: string) => base32(secretBox.mac(PURPOSE, id), TAG_LENGTH);
  return {
    forRecipient(recipientId, on) {
      // The id without its `rcpt_` prefix: local parts stay short (43 characters).
      return `${LOCAL_PREFIX}${recipientId.slice('rcpt_'.length)}${tagOf(recipientId)}@${(on ?? own).toLowerCase()}`;
    },
    isBounceDomain: (name) => name.toLowerCase().replace(/\.$/, '') === own,
    isReturnPath: (address) => address.toLowerCase().startsWith(LOCAL_PREFIX) && address.includes('@'),
    recipientOf(address) {
      const lower = address.toLowerCase();
      const at = lower.lastIndexOf('@');
      if (!lower.startsWith(LOCAL_PREFIX) || at < 0) return undefined;
      const token = lower.slice(LOCAL_PREFIX.length, at);
      if (token.length !== 26 + TAG_LENGTH) return undefined;
      const id = `rcpt_${token.slice(0, 26)}`;
      if (!isId('rcpt', id)) return undefined;
      const expected = Buffer.from(tagOf(id));
      const given = Buffer.from(token.slice(26));
      return timingSafeEqual(expected, given) ? id : undefined;
    },
  };
}
