import { spawn } from 'node:child_process';
import http from 'node:http';
import { fileURLToPath } from 'node:url';

// Asks a running server at a steady rate, from a process of its own, and reports how long each request
// took. Its own process: the test process is busy sending and polling while it measures, and its event
// loop would add its delays to the server's. A steady rate, not one request after another: a server that
// stalls for 600 ms would hold one sequential request (one slow sample among hundreds, invisible to a p99),
// while here every request due in those 600 ms waits, as every client's would. Run as a script, it warms up
// (its connection, its own JIT), says `ready`, then probes until its standard input closes and prints the
// latencies (ms) as JSON; `startLatencyProbe` runs it.

/** Requests made before measuring, not counted: the first ones time the probe's start-up, not the server. */
const WARM_UP_REQUESTS = 50;
/** A request is sent every this many ms, whether the ones before it were answered or not. */
const INTERVAL_MS = 5;

export interface LatencyProbe {
  /** Stops asking; resolves to the latency in ms of every request made since it was ready, in order. */
  stop(): Promise<number[]>;
}

/** Starts the probe; resolves once it is warm and measuring. */
export async function startLatencyProbe(url: string, key: string): Promise<LatencyProbe> {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), url, key], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  let output = '';
  let onReady: (() => void) | undefined;
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
    if (onReady && output.startsWith('ready\n')) onReady();
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  await new Promise<void>((resolve, reject) => {
    onReady = resolve;
    void exited.then((code) => reject(new Error(`the latency probe exited with ${code}: ${output}`)));
  });
  return {
    async stop() {
      child.stdin.end();
      const code = await exited;
      if (code !== 0) throw new Error(`the latency probe exited with ${code}: ${output}`);
      return JSON.parse(output.slice('ready\n'.length)) as number[];
    },
  };
}

async function probe(url: string, key: string): Promise<void> {
  let asking = true;
  process.stdin.on('end', () => (asking = false)).resume();
  // node:http with kept-alive connections rather than fetch: about a third of fetch's CPU a request
  // (bench/README.md, "CI under 20 minutes"), CPU this process would otherwise take from the server it times
  // on a two-core machine.
  const agent = new http.Agent({ keepAlive: true });
  const ask = () =>
    new Promise<number>((resolve, reject) => {
      const started = performance.now();
      http
        .get(url, { agent, headers: { authorization: `Bearer ${key}` } }, (response) => {
          response.resume().on('end', () => {
            if (response.statusCode === 200) resolve(performance.now() - started);
            else reject(new Error(`${url} answered ${response.statusCode}`));
          });
        })
        .on('error', reject);
    });
  for (let i = 0; i < WARM_UP_REQUESTS; i++) await ask();
  process.stdout.write('ready\n');
  const answers: Array<Promise<number>> = [];
  const started = performance.now();
  for (let sent = 0; asking; sent++) {
    answers.push(ask());
    // The next request is due at its place in the schedule, however late this one was sent.
    const due = started + (sent + 1) * INTERVAL_MS;
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, due - performance.now())));
  }
  process.stdout.write(JSON.stringify(await Promise.all(answers)));
  agent.destroy();
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [url, key] = process.argv.slice(2) as [string, string];
  await probe(url, key);
}
