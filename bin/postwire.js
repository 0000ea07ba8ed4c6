#!/usr/bin/env node
// The `postwire` command. The code is TypeScript run by Node's type stripping, which needs Node 24 (package.json
// "engines"), and Node strips types only outside node_modules. So this file is plain JavaScript that any Node
// from 18 on can start, and it runs the server in one of two ways:
// - in this process, when this Node is 24 or newer and the package is a checkout (npm scripts, the tests);
// - else in a child process on the Node 24 that the package depends on (the `node` package), with
//   type-stripping-hooks.js loaded: that is how an `npm install -g` of the package runs, whatever the system
//   Node is (the global install puts the package under node_modules).
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import process from 'node:process';
import { fileURLToPath, pathToFileURL } from 'node:url';

const MINIMUM_MAJOR = 24;
const HOOKS = fileURLToPath(new URL('./type-stripping-hooks.js', import.meta.url));
const packageRoot = fileURLToPath(new URL('..', import.meta.url));

const major = Number(process.versions.node.split('.')[0]);
const underNodeModules = packageRoot.split(path.sep).includes('node_modules');
// Set by type-stripping-hooks.js: this process is the child started below, and can load the .ts files.
const hooksLoaded = globalThis[Symbol.for('postwire.typeStrippingHooks')] === true;

if (major >= MINIMUM_MAJOR && (!underNodeModules || hooksLoaded)) {
  const { main } = await import('../src/cli.ts');
  await main(process.argv.slice(2));
} else {
  runOnPinnedNode();
}

/** The `node` dependency's executable, read from its package.json as npm links it (bin/node.exe on Windows). */
function pinnedNode() {
  try {
    const require = createRequire(import.meta.url);
    const manifestPath = require.resolve('node/package.json');
    const manifest = JSON.parse(readFileSync(manifestPath, 'utf8'));
    const bin = typeof manifest.bin === 'string' ? manifest.bin : manifest.bin?.node;
    const executable = bin && path.resolve(path.dirname(manifestPath), bin);
    return executable && existsSync(executable) ? executable : undefined;
  } catch {
    return undefined;
  }
}

function runOnPinnedNode() {
  // Without the pinned Node (npm skipped the `node` package's install script), a Node that is new enough will
  // do. A child that has the hooks already is the re-executed one: starting yet another would only loop.
  const node = hooksLoaded
    ? undefined
    : (pinnedNode() ?? (major >= MINIMUM_MAJOR ? process.execPath : undefined));
  if (!node) {
    process.stderr.write(
      `postwire needs Node.js ${MINIMUM_MAJOR} or newer; this is Node.js ${process.version}, and the Node.js ` +
        `of its "node" dependency is missing: npm did not run that package's install script ` +
        '(`npm help install-scripts` says when it skips them).\n',
    );
    process.exit(1);
  }
  const args = underNodeModules ? ['--import', pathToFileURL(HOOKS).href] : [];
  // Its own process group: a Ctrl-C in a terminal then reaches the child once, forwarded from here, instead of
  // twice (from the terminal and from here), which the server takes as "exit without waiting" unless the kernel
  // happens to merge the two while the first is pending. (Ctrl-Z then stops only this launcher.)
  const detached = process.platform !== 'win32';
  const child = spawn(node, [...args, fileURLToPath(import.meta.url), ...process.argv.slice(2)], {
    stdio: 'inherit',
    detached,
  });
  const forwarded = ['SIGTERM', 'SIGINT', 'SIGHUP'];
  const forward = (signal) => child.kill(signal);
  for (const signal of forwarded) process.on(signal, forward);
  child.on('error', (error) => {
    process.stderr.write(`postwire could not start ${node}: ${error.message}\n`);
    process.exit(1);
  });
  child.on('exit', (code, signal) => {
    for (const name of forwarded) process.off(name, forward);
    if (signal) {
      // Die of the same signal, so that a shell or a supervisor sees what the child saw (the handlers are
      // off, so its default action ends this process); the timer is only for a signal whose default is to go on.
      process.kill(process.pid, signal);
      setTimeout(() => process.exit(1), 1000);
      return;
    }
    process.exit(code ?? 1);
  });
}
