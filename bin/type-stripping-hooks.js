// Loaded with `node --import` by bin/postwire.js when the package runs from under node_modules (an npm install),
// where Node refuses to strip TypeScript types (ERR_UNSUPPORTED_NODE_MODULES_TYPE_STRIPPING). It strips them
// itself, for this package's own .ts files only, as Node would elsewhere; worker threads inherit `--import`, so
// the render and parse threads load theirs the same way.
import { readFileSync } from 'node:fs';
import { registerHooks, stripTypeScriptTypes } from 'node:module';
import process from 'node:process';

const packageRoot = new URL('../', import.meta.url).href;

/** Whether `url` is one of this package's own TypeScript files (not one of its dependencies'). */
function isOwnTypeScript(url) {
  return (
    url.startsWith(packageRoot) &&
    url.endsWith('.ts') &&
    !url.slice(packageRoot.length).includes('node_modules/')
  );
}

let warned = false;

/**
 * Types stripped as Node strips them itself ("strip" mode: only whitespace replaces the types, so line and
 * column numbers in stack traces stay right).
 */
function strip(source) {
  if (warned) return stripTypeScriptTypes(source);
  // Node 24 calls stripTypeScriptTypes experimental and says so on stderr once per thread; it is the same code
  // that strips the types of a checkout, so that line would tell an operator nothing.
  const emitWarning = process.emitWarning;
  process.emitWarning = () => {};
  try {
    return stripTypeScriptTypes(source);
  } finally {
    process.emitWarning = emitWarning;
    warned = true;
  }
}

registerHooks({
  load(url, context, nextLoad) {
    if (!isOwnTypeScript(url)) return nextLoad(url, context);
    const source = readFileSync(new URL(url), 'utf8');
    // package.json says "type": "module": every .ts file of the package is an ES module.
    return { format: 'module', source: strip(source), shortCircuit: true };
  },
});

globalThis[Symbol.for('postwire.typeStrippingHooks')] = true;
