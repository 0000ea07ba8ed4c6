import { runCli as runCommand } from '../../src/cli.ts';
import type { CliResult } from './process.ts';

/**
 * Runs a `postwire` command in the test's own process, as `runCli` does in a child (the same output and exit
 * code), for commands whose process is not what the test is about: a process start costs about a CPU-second
 * (bench/README.md, "CI under 20 minutes"). Apart from process.ts so that files that only start processes do
 * not load the CLI's code.
 */
export async function runCliInProcess(args: string[], env: Record<string, string>): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  const code = await runCommand(args, {
    stdout: { write: (text: string) => (stdout += text) },
    stderr: { write: (text: string) => (stderr += text) },
    env,
  });
  const lines = stdout.split('\n').filter((line) => line.trim() !== '');
  return { code: code ?? null, stdout, stderr, lastLine: lines.at(-1) ?? '' };
}
