// Summarises a V8 `.cpuprofile` (from `node --cpu-prof`): where the samples land, by package or source
// file and by function. `node bench/profile.ts <file.cpuprofile> [rows]`; bench/api.ts --profile calls it.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** The package, source file or V8 bucket a frame belongs to. */
function area(frame: ProfileNode['callFrame']): string {
  const { url, functionName } = frame;
  if (!url) return functionName.startsWith('(') ? functionName : '(native)';
  const file = url.startsWith('file://') ? fileURLToPath(url) : url;
  const modules = file.lastIndexOf('/node_modules/');
  if (modules >= 0) {
    const parts = file.slice(modules + '/node_modules/'.length).split('/');
    return parts[0]!.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]!;
  }
  if (file.startsWith('node:')) {
    const name = file.slice('node:'.length).replace(/^internal\//, '');
    return `node:${name.split('/')[0]}`;
  }
  if (file.startsWith(ROOT)) return path.relative(ROOT, file);
  return file;
}

function functionKey(frame: ProfileNode['callFrame']): string {
  const where = frame.url ? `${area(frame)}:${frame.lineNumber + 1}` : area(frame);
  return `${frame.functionName || '(anonymous)'}  ${where}`;
}

export function summarizeProfile(file: string, rows = 20): string {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);

  // Each sample stands for the time until the next one.
  const weight = new Map<number, number>();
  profile.samples.forEach((id, i) => {
    const delta = profile.timeDeltas[i + 1] ?? 0;
    weight.set(id, (weight.get(id) ?? 0) + delta);
  });
  const idle = [...weight].filter(([id]) => byId.get(id)!.callFrame.functionName === '(idle)');
  const total = [...weight.values()].reduce((a, b) => a + b, 0);
  const busy = total - idle.reduce((sum, [, w]) => sum + w, 0);

  const selfByArea = new Map<string, number>();
  const selfByFunction = new Map<string, number>();
  const inclusiveByArea = new Map<string, number>();
  const inclusiveBySource = new Map<string, number>();
  for (const [id, w] of weight) {
    const node = byId.get(id)!;
    if (node.callFrame.functionName === '(idle)') continue;
    const add = (map: Map<string, number>, key: string) => map.set(key, (map.get(key) ?? 0) + w);
    add(selfByArea, area(node.callFrame));
    add(selfByFunction, functionKey(node.callFrame));
    // Inclusive: count the sample once for every area on its stack (async stacks are short, so this
    // understates callers across awaits, but shows which layers code runs under).
    const seen = new Set<string>();
    const ours = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const frame = byId.get(at)!.callFrame;
      if (frame.functionName === '(root)') continue;
      const where = area(frame);
      seen.add(where);
      if (where.startsWith('src/')) ours.add(functionKey(frame));
    }
    for (const key of seen) add(inclusiveByArea, key);
    for (const key of ours) add(inclusiveBySource, key);
  }

  const pct = (w: number) => `${((100 * w) / busy).toFixed(1).padStart(5)} %`;
  const top = (map: Map<string, number>) =>
    [...map]
      .sort((a, b) => b[1] - a[1])
      .slice(0, rows)
      .map(([key, w]) => `  ${pct(w)}  ${key}`)
      .join('\n');
  return [
    `${path.basename(file)}: ${(total / 1e6).toFixed(1)} s sampled, ${((100 * busy) / total).toFixed(0)} % busy; shares below are of busy time`,
    'self time by package / file:',
    top(selfByArea),
    'inclusive time by package / file (on the stack):',
    top(inclusiveByArea),
    'self time by function:',
    top(selfByFunction),
    "inclusive time by the project's own functions (src/):",
    top(inclusiveBySource),
  ].join('\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const [file, rows] = process.argv.slice(2);
  if (!file) throw new Error('usage: node bench/profile.ts <file.cpuprofile> [rows]');
  console.log(summarizeProfile(file, rows ? Number(rows) : undefined));
}
