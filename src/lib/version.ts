import { readFileSync } from 'node:fs';

// package.json is the one place the version is written: `postwire --version` and the OpenAPI document
// read it from there.
const manifest = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

export const POSTWIRE_VERSION = manifest.version;
