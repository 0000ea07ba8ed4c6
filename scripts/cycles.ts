// No import cycles in src, between files or between modules: `npm run cycles`, part of `npm run check`. A
// module is a folder of src/modules or one of src's own folders (db, http, lib, queue); each file directly in
// src is one of its own. The graph is madge's, type-only imports included: a type is a dependency too.
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

const graph = JSON.parse(
  execFileSync(
    process.execPath,
    [path.join(root, 'node_modules/madge/bin/cli.js'), '--json', '--extensions', 'ts', 'src'],
    { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] },
  ),
) as Record<string, string[]>;

const moduleOf = (file: string): string => {
  const parts = file.split('/');
  if (parts[0] === 'modules') return `modules/${parts[1]}`;
  return parts.length === 1 ? file : parts[0]!;
};

/** The strongly connected components of more than one node (Tarjan): each is a cycle or several. */
function cycles(edges: ReadonlyMap<string, ReadonlySet<string>>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (node: string): void => {
    index.set(node, index.size);
    low.set(node, index.get(node)!);
    stack.push(node);
    onStack.add(node);
    for (const next of edges.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node)!, low.get(next)!));
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node)!, index.get(next)!));
      }
    }
    if (low.get(node) !== index.get(node)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
    } while (member !== node);
    if (component.length > 1) found.push(component.sort());
  };
  for (const node of edges.keys()) if (!index.has(node)) visit(node);
  return found;
}

const files = new Map<string, Set<string>>();
const modules = new Map<string, Set<string>>();
for (const [file, imports] of Object.entries(graph)) {
  files.set(file, new Set(imports));
  const from = moduleOf(file);
  const targets = modules.get(from) ?? new Set<string>();
  for (const target of imports.map(moduleOf)) if (target !== from) targets.add(target);
  modules.set(from, targets);
}

const problems = [
  ...cycles(files).map((cycle) => `files: ${cycle.join(' ⇄ ')}`),
  ...cycles(modules).map((cycle) => `modules: ${cycle.join(' ⇄ ')}`),
];
if (problems.length > 0) {
  console.error(`Import cycles in src:\n${problems.map((problem) => `  ${problem}`).join('\n')}`);
  process.exit(1);
}
console.log(`No import cycles among ${files.size} files and ${modules.size} modules`);
