// Reading rules more than one section uses: a domain name, PEM text or file, a certificate pair, a port.
import { createPrivateKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { custom, rawValue, type ReadContext, readInteger, type Setting } from '../lib/settings.ts';

export const DOMAIN_NAME = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$/i;

/** A PEM setting: the text itself (line breaks may come as \n escapes) or the path of a PEM file. */
export function pemSetting(context: ReadContext, name: string): string | undefined {
  const value = rawValue(context, name);
  if (value === undefined) return undefined;
  if (value.includes('-----BEGIN')) return value.replace(/\\n/g, '\n');
  try {
    return readFileSync(value, 'utf8');
  } catch {
    context.problems.push(`${name} is neither a PEM key nor a readable file ('${value}').`);
    return undefined;
  }
}

/** A certificate and its key, both or neither, each PEM text or a file path. */
export function tlsPair(
  context: ReadContext,
  certEnv: string,
  keyEnv: string,
  what: string,
): { cert: string; key: string } | undefined {
  const cert = pemSetting(context, certEnv);
  const key = pemSetting(context, keyEnv);
  if ((cert === undefined) !== (key === undefined)) {
    context.problems.push(`${what} needs both ${certEnv} and ${keyEnv}.`);
    return undefined;
  }
  if (cert === undefined || key === undefined) return undefined;
  try {
    createPrivateKey(key);
  } catch {
    context.problems.push(`${keyEnv} does not hold a valid PEM private key.`);
    return undefined;
  }
  return { cert, key };
}

/** A TCP port, or unset (undefined: nothing listens there). 0 picks a free port (tests). */
export function optionalPort(
  env: string,
  described: { description: string; details?: string; default?: string },
): Setting<number | undefined> {
  return custom(env, {
    default: 'unset',
    ...described,
    read: (context) => readInteger(context, env, 0, 65535),
  });
}
