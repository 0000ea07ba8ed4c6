import { generateKeyPair, randomBytes } from 'node:crypto';
import { promisify } from 'node:util';

const generate = promisify(generateKeyPair);

export interface DkimKeyPair {
  selector: string;
  /** The public key as DKIM's `p=` carries it: base64 of the SubjectPublicKeyInfo DER. */
  publicKey: string;
  /** PKCS#8 PEM, as nodemailer signs with it. */
  privateKeyPem: string;
}

/**
 * A fresh RSA 2048 key pair (what every receiver verifies; RFC 8301 asks for at least 1024, 2048 fits a TXT
 * record) under a new selector. Generated off the event loop: it takes tens to hundreds of milliseconds.
 * Selectors are random, so a rotation never reuses a name a resolver may still have cached.
 */
export async function generateDkimKey(): Promise<DkimKeyPair> {
  const { publicKey, privateKey } = await generate('rsa', { modulusLength: 2048 });
  const selector = `pw${randomBytes(5).toString('hex')}`;
  return {
    selector,
    publicKey: publicKey.export({ type: 'spki', format: 'der' }).toString('base64'),
    privateKeyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  };
}

/** The TXT record that publishes a public key. */
export const dkimRecordValue = (publicKey: string): string => `v=DKIM1; k=rsa; p=${publicKey}`;

/**
 * Whether a published DKIM record carries this public key (RFC 6376 §3.6.1): tags in any order and spacing,
 * `v=DKIM1` if present, key type RSA (the default), and `p=` equal once whitespace is removed.
 */
export function dkimRecordMatches(published: string, publicKey: string): boolean {
  const tags = new Map<string, string>();
  for (const part of published.split(';')) {
    const at = part.indexOf('=');
    if (at < 0) continue;
    tags.set(part.slice(0, at).trim().toLowerCase(), part.slice(at + 1).replace(/\s+/g, ''));
  }
  const version = tags.get('v');
  if (version !== undefined && version !== 'DKIM1') return false;
  const type = tags.get('k');
  if (type !== undefined && type.toLowerCase() !== 'rsa') return false;
  return tags.get('p') === publicKey;
}
