import { timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import type { Clock } from '../../lib/clock.ts';
import type { SecretBox } from '../../lib/crypto.ts';
import { DomainError } from '../../lib/errors.ts';

// Resend answers files (a received message's bytes, attachments) as `download_url`s anyone holding them can
// fetch for a while, without a key: the SDK's `receiving.forward` fetches the raw message with a plain fetch.
// Postwire's are signed: the file named (kind, project, id, index) and the expiry, under an HMAC of the server
// key with a purpose of its own. Checking one needs no database; an altered or expired link is a 404.

export type DownloadKind = 'received-raw' | 'received-attachment' | 'email-attachment';
const KINDS: readonly DownloadKind[] = ['received-raw', 'received-attachment', 'email-attachment'];

/** How long a link works: Resend's are an hour. */
export const DOWNLOAD_LINK_TTL_MS = 60 * 60 * 1000;
const TAG_BYTES = 16;

export interface DownloadRef {
  kind: DownloadKind;
  projectId: string;
  id: string;
  index: number;
}

export interface DownloadLink {
  download_url: string;
  expires_at: string;
}

export interface DownloadLinks {
  /** A link to the file, at the origin the request came to (the one the SDK reached /resend at). */
  link(request: FastifyRequest, ref: DownloadRef): DownloadLink;
  /** The file a token names, if it verifies and has not expired; else a 404. */
  read(token: string): DownloadRef;
}

export const DOWNLOAD_PATH = '/downloads';

const expired = (): DomainError =>
  new DomainError('not_found', 'resource_missing', 'This download link is unknown or has expired.', 'token');

export function createDownloadLinks({
  secretBox,
  clock,
}: {
  secretBox: SecretBox;
  clock: Clock;
}): DownloadLinks {
  const tagOf = (payload: string) => secretBox.mac('resend download', payload).subarray(0, TAG_BYTES);
  return {
    link(request, { kind, projectId, id, index }) {
      const expiresAt = clock.now().getTime() + DOWNLOAD_LINK_TTL_MS;
      const payload = [kind, projectId, id, index, Math.ceil(expiresAt / 1000)].join('~');
      const token = `${Buffer.from(payload).toString('base64url')}.${tagOf(payload).toString('base64url')}`;
      return {
        download_url: `${request.protocol}://${request.host}/resend${DOWNLOAD_PATH}?token=${token}`,
        expires_at: new Date(Math.ceil(expiresAt / 1000) * 1000).toISOString(),
      };
    },
    read(token) {
      const [encoded, tag, extra] = token.split('.');
      if (!encoded || !tag || extra !== undefined) throw expired();
      const payload = Buffer.from(encoded, 'base64url').toString();
      const given = Buffer.from(tag, 'base64url');
      if (given.length !== TAG_BYTES || !timingSafeEqual(given, tagOf(payload))) throw expired();
      const [kind, projectId, id, index, expires] = payload.split('~');
      if (Number(expires) * 1000 <= clock.now().getTime()) throw expired();
      if (!KINDS.includes(kind as DownloadKind) || !projectId || !id) throw expired();
      return { kind: kind as DownloadKind, projectId, id, index: Number(index) };
    },
  };
}
