#!/usr/bin/env node
// The `postwire` command. The code is TypeScript run by Node's type stripping, which needs Node 24
// (package.json "engines"); say so plainly instead of failing on the .ts import under an older Node.
import process from 'node:process';

const major = Number(process.versions.node.split('.')[0]);
if (major < 24) {
  process.stderr.write(`postwire needs Node.js 24 or newer; this is Node.js ${process.version}.\n`);
  process.exit(1);
}
const { main } = await import('../src/cli.ts');
await main(process.argv.slice(2));
