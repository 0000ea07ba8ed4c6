import {
  createCipheriv,
  createDecipheriv,
  createHmac,
  createSecretKey,
  hash,
  hkdfSync,
  type KeyObject,
  randomBytes,
  timingSafeEqual,
} from 'node:crypto';

/** One-shot hashing: a third of createHash's cost on a short input (every request hashes its key). */
export function sha256Hex(value: string): string {
  return hash('sha256', value, 'hex');
}

export function constantTimeEqual(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}

/** Random url-safe token of `bytes` bytes of entropy. */
export function randomToken(bytes = 24): string {
  return randomBytes(bytes).toString('base64url');
}

export interface SecretBox {
  seal(plaintext: string): string;
  open(sealed: string): string;
  /** HMAC-SHA256 of `data` under a key derived from the server key for `purpose` (so uses never mix). */
  mac(purpose: string, data: string): Buffer;
}

// AES-256-GCM; the stored form is `v1.<iv>.<tag>.<ciphertext>` in base64url so the format can evolve.
export function createSecretBox(rawKey: Buffer): SecretBox {
  if (rawKey.length !== 32) throw new Error('The encryption key must be 32 bytes.');
  // A KeyObject made once: given the raw bytes, every seal and open would import the key again.
  const key = createSecretKey(rawKey);
  // KeyObjects too: given bytes, every HMAC imports its key again (a quarter of its cost; a broadcast's
  // fan-out signs a preference link per copy).
  const macKeys = new Map<string, KeyObject>();
  const macKey = (purpose: string) => {
    let derived = macKeys.get(purpose);
    if (!derived) {
      derived = createSecretKey(
        Buffer.from(hkdfSync('sha256', rawKey, Buffer.alloc(0), `postwire ${purpose}`, 32)),
      );
      macKeys.set(purpose, derived);
    }
    return derived;
  };
  return {
    mac(purpose, data) {
      return createHmac('sha256', macKey(purpose)).update(data).digest();
    },
    seal(plaintext) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      const ciphertext = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
      const tag = cipher.getAuthTag();
      return ['v1', iv, tag, ciphertext]
        .map((part) => (typeof part === 'string' ? part : part.toString('base64url')))
        .join('.');
    },
    open(sealed) {
      const [version, iv, tag, ciphertext] = sealed.split('.');
      if (version !== 'v1' || !iv || !tag || ciphertext === undefined)
        throw new Error('Unknown sealed secret format.');
      const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'));
      decipher.setAuthTag(Buffer.from(tag, 'base64url'));
      return Buffer.concat([
        decipher.update(Buffer.from(ciphertext, 'base64url')),
        decipher.final(),
      ]).toString('utf8');
    },
  };
}
