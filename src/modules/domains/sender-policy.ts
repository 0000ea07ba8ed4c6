import type { DkimConfig } from '../../config.ts';
import type { SecretBox } from '../../lib/crypto.ts';
import { DomainError, invalidParam } from '../../lib/errors.ts';
import { selfAndParents } from './domain-name.ts';
import type { DomainSettings } from './domain-settings.ts';
import type { DomainRepo } from './domains.repo.ts';
import { returnPathName } from './records.ts';

// Who may send as a domain, and what an accepted email is signed with: the one rule for the API and SMTP
// submission, and for the sending worker.

/** How an email is authenticated, decided when it is accepted and stored with it. */
export interface SenderAuthentication {
  /** The DKIM `d=`: a verified domain of the project, the fallback DKIM_DOMAIN, or null (unsigned). */
  dkimDomain: string | null;
  /** The envelope sender's domain: the verified return path, BOUNCE_DOMAIN, or the From domain. */
  returnPathDomain: string;
}

/** What the sending worker signs an email with; absent parts fall back to the transport's own settings. */
export interface SigningIdentity {
  dkim?: DkimConfig;
  /** The customer's return-path domain to build the envelope sender on. */
  returnPathDomain?: string;
}

/** Relaxed alignment (RFC 7489 §3.1): the same domain, or one is a subdomain of the other. */
export const aligned = (a: string, b: string): boolean =>
  a === b || a.endsWith(`.${b}`) || b.endsWith(`.${a}`);

export function createSenderPolicy(deps: {
  repo: Pick<DomainRepo, 'find' | 'findByName' | 'covering' | 'isReturnPathDomain'>;
  secretBox: SecretBox;
  settings: Pick<DomainSettings, 'returnPath' | 'senderDomains' | 'fallbackDkim' | 'bounceDomain'>;
}) {
  const { repo, secretBox, settings } = deps;
  /** Opened private keys by sealed value: opening is cheap, but a sending worker asks for every message. */
  const keys = new Map<string, string>();
  const openKey = (sealed: string): string => {
    let pem = keys.get(sealed);
    if (pem === undefined) {
      if (keys.size >= 1000) keys.clear();
      pem = secretBox.open(sealed);
      keys.set(sealed, pem);
    }
    return pem;
  };

  return {
    /**
     * A sending key limited to one domain (its `domain_id`) sends only as that domain or one of its
     * subdomains: anything else is a 403 naming the domain. The one rule for the API and SMTP submission.
     */
    async authorizeKeyDomain(
      projectId: string,
      keyDomainId: string,
      fromDomain: string,
      param: string,
    ): Promise<void> {
      const from = fromDomain.toLowerCase();
      const domain = await repo.find(projectId, keyDomainId);
      if (domain && selfAndParents(from).includes(domain.name)) return;
      throw new DomainError(
        'forbidden',
        'insufficient_permission',
        domain
          ? `This key may send only from the domain '${domain.name}'; '${from}' is not it.`
          : `This key may send only from the domain '${keyDomainId}', which no longer exists; '${from}' is not it.`,
        param,
      );
    },

    /**
     * Who may send as `fromDomain`: the most specific verified domain among it and its parents decides. Held
     * by another project: refused in every mode. Held by this one: signed with its key (DMARC-aligned), its
     * return path used when verified. Neither: refused under SENDER_DOMAINS=verified, else the fallback key.
     */
    async authorizeSender(
      projectId: string,
      fromDomain: string,
      param: string,
    ): Promise<SenderAuthentication> {
      const from = fromDomain.toLowerCase();
      const candidates = await repo.covering(selfAndParents(from));
      const verified = candidates
        .filter((domain) => domain.status === 'verified')
        .sort((a, b) => b.name.length - a.name.length);
      const best = verified[0];
      if (best && best.projectId !== projectId) {
        throw invalidParam(
          param,
          `'${from}' is covered by the domain '${best.name}', which another project has verified: this project cannot send as it.`,
          'sender_domain_not_allowed',
        );
      }
      if (best) {
        return {
          dkimDomain: best.name,
          returnPathDomain:
            settings.returnPath && best.returnPathVerified
              ? returnPathName(best.name)
              : (settings.bounceDomain ?? from),
        };
      }
      if (settings.senderDomains === 'verified') {
        const own = candidates
          .filter((domain) => domain.projectId === projectId)
          .sort((a, b) => b.name.length - a.name.length)[0];
        throw invalidParam(
          param,
          own
            ? `The domain '${from}' is covered by this project's domain '${own.name}', which is ${own.status}: publish its DNS records and verify it (POST /v1/domains/${own.id}/verify).`
            : `The domain '${from}' is not a verified domain of this project: add it (POST /v1/domains {"name": "${from}"}), publish its DNS records and verify it.`,
          'sender_domain_not_verified',
        );
      }
      return {
        dkimDomain: settings.fallbackDkim?.domain ?? null,
        returnPathDomain: settings.bounceDomain ?? from,
      };
    },

    /**
     * The key to sign an accepted email with: that of the project's domain it was accepted for, while it is
     * verified (else nothing: the transport's fallback key signs, as for an unverified domain; so a domain
     * another project took over, or whose records stopped matching, signs nothing more), and its return
     * path when the email was accepted with it.
     */
    async signingFor(
      projectId: string,
      email: { dkimDomain: string | null; returnPathDomain: string | null },
    ): Promise<SigningIdentity> {
      if (email.dkimDomain === null) return {};
      const domain = await repo.findByName(projectId, email.dkimDomain);
      if (!domain || domain.status !== 'verified') return {};
      const returnPath = returnPathName(domain.name);
      return {
        dkim: {
          domain: domain.name,
          selector: domain.dkimSelector,
          privateKey: openKey(domain.dkimPrivateKeySealed),
        },
        ...(email.returnPathDomain === returnPath ? { returnPathDomain: returnPath } : {}),
      };
    },

    /**
     * Whether mail to `name` is ours to receive as a return path: `bounces.<domain>` for a domain some
     * project has added (the inbound listener asks before accepting RCPT TO; the address's tag still decides).
     */
    isReturnPathDomain: (name: string): Promise<boolean> => repo.isReturnPathDomain(name),
  };
}
