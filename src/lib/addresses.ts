import { domainToASCII } from 'node:url';

// Email addresses as the send API accepts them: `a@b.c`, `Name <a@b.c>`, `"Doe, Jane" <a@b.c>` or `<a@b.c>`.
// Strict enough that whatever passes can be put in a header and an SMTP envelope as is: an ASCII dot-atom
// local part (no quoted local parts, no SMTPUTF8) and a domain that is a real host name (IDN domains are
// turned into their punycode form). Pure functions: the service maps failures to 422s with the field.

export interface ParsedAddress {
  /** Display name, or null. */
  name: string | null;
  /** `local@domain`, the domain lowercased ASCII. */
  address: string;
  /** The domain alone: where the message goes (its MX). */
  domain: string;
}

export type AddressResult = { ok: true; value: ParsedAddress } | { ok: false; reason: string };

const ATEXT = "A-Za-z0-9!#$%&'*+/=?^_`{|}~-";
const LOCAL_PART = new RegExp(`^[${ATEXT}]+(\\.[${ATEXT}]+)*$`);
const LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
/**
 * An address in the form parseAddress gives it: a dot-atom local part and a lower-case ASCII domain (the
 * domain's labels themselves are checked when it is parsed; here only its characters).
 */
export const STORED_ADDRESS = new RegExp(`^[${ATEXT}]+(\\.[${ATEXT}]+)*@[a-z0-9.-]+$`);
// A display name that needs no quoting in a header: atext, spaces and dots.
const PLAIN_NAME = new RegExp(`^[ .${ATEXT}]+$`);
const MAX_NAME_LENGTH = 200;

const fail = (reason: string): AddressResult => ({ ok: false, reason });

export function parseAddress(input: string): AddressResult {
  // Line breaks and other control characters could start a new header (header injection).
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(input)) return fail('contains a line break or control character');
  const text = input.trim();
  if (text === '') return fail('is empty');

  let name: string | null = null;
  let bare = text;
  if (text.endsWith('>')) {
    const open = text.lastIndexOf('<');
    if (open === -1) return fail("has a '>' without a '<'");
    bare = text.slice(open + 1, -1).trim();
    const display = text.slice(0, open).trim();
    if (display !== '') {
      const unquoted = unquote(display);
      if (unquoted === undefined) return fail('has a display name with an unbalanced or misplaced quote');
      if (/[<>]/.test(unquoted) && !display.startsWith('"')) {
        return fail("has '<' or '>' in an unquoted display name");
      }
      if (unquoted.length > MAX_NAME_LENGTH)
        return fail(`has a display name over ${MAX_NAME_LENGTH} characters`);
      name = unquoted.trim() === '' ? null : unquoted.trim();
    }
  } else if (/[<>]/.test(text)) {
    return fail('is not of the form a@example.com or Name <a@example.com>');
  }

  const at = bare.lastIndexOf('@');
  if (at <= 0 || at === bare.length - 1) return fail('is not of the form a@example.com');
  const local = bare.slice(0, at);
  const domainInput = bare.slice(at + 1);
  if (local.length > 64) return fail('has a local part (before @) over 64 characters');
  if (!LOCAL_PART.test(local)) return fail(`has an invalid local part '${local}'`);
  const domain = normalizeDomain(domainInput);
  if (!domain) return fail(`has an invalid domain '${domainInput}'`);
  const address = `${local}@${domain}`;
  if (address.length > 254) return fail('is longer than 254 characters');
  return { ok: true, value: { name, address, domain } };
}

/** The address as stored and shown: `a@b.c`, `Name <a@b.c>` or `"Doe, Jane" <a@b.c>`. */
export function formatAddress(parsed: ParsedAddress): string {
  if (parsed.name === null) return parsed.address;
  const name = PLAIN_NAME.test(parsed.name)
    ? parsed.name
    : `"${parsed.name.replace(/[\\"]/g, (char) => `\\${char}`)}"`;
  return `${name} <${parsed.address}>`;
}

/** A domain as lowercased ASCII (IDN → punycode), or undefined when it cannot be a mail domain. */
function normalizeDomain(input: string): string | undefined {
  if (input.length === 0 || input.length > 253 || input.endsWith('.')) return undefined;
  // Address literals ([192.0.2.1]) and bare IP addresses are not accepted: mail goes to names.
  if (/^\[.*\]$/.test(input) || /^[\d.]+$/.test(input)) return undefined;
  const ascii = domainToASCII(input.toLowerCase());
  if (!ascii || ascii.length > 253) return undefined;
  const labels = ascii.split('.');
  if (labels.length < 2 || !labels.every((label) => LABEL.test(label))) return undefined;
  // The top-level domain is never all digits (that would be an IP address).
  if (/^\d+$/.test(labels.at(-1)!)) return undefined;
  return ascii;
}

/** The text of a display name: a quoted string unquoted (`\x` → `x`), or the text as is when unquoted. */
function unquote(display: string): string | undefined {
  if (!display.startsWith('"')) return display.includes('"') ? undefined : display;
  let out = '';
  for (let i = 1; i < display.length; i += 1) {
    const char = display[i]!;
    if (char === '\\') {
      i += 1;
      if (i >= display.length) return undefined;
      out += display[i];
    } else if (char === '"') {
      return i === display.length - 1 ? out : undefined;
    } else {
      out += char;
    }
  }
  return undefined;
}

/**
 * A Message-ID as Postwire keeps and matches one (RFC 5322 3.6.4's msg-id, loosely): in angle brackets, no
 * spaces or brackets inside, a line's worth at most.
 */
export const MESSAGE_ID_PATTERN = /^<[^<>\s]{1,995}>$/;
