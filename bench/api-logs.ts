// The CPU the API logs add to each keyed request (issues 39, 43): the hook's push onto the buffer, then, when
// the buffer is written, the excerpts of both bodies and the multi-row INSERT, per request, on this machine
// and engine; for two requests: an accepted send (its body and its small 202) and a read of the bench's list
// (`GET /v1/webhooks`, 20 webhooks: no body, an answer of about 10 KB, the one `npm run bench:api` reads).
// In-process and measured in CPU time (process.cpuUsage), so other work sharing the machine skews it less than
// a throughput figure; `npm run bench:api` shows the same cost in a whole request, with its noise.
//
//   node bench/api-logs.ts                      # SQLite in a temporary directory
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test node bench/api-logs.ts
//   node bench/api-logs.ts --excerpts           # the excerpts alone, no INSERT (µs CPU an answer)
import { parseArgs } from 'node:util';
import { newId } from '../src/lib/ids.ts';
import { excerptOf, excerptOfAnswer } from '../src/modules/logs/log-excerpt.ts';
import { type ApiLogEntry, API_LOG_WRITING, createApiLogRecorder } from '../src/modules/logs/log-recorder.ts';
import { createApiLogRepo } from '../src/modules/logs/logs.repo.ts';
import { startBenchApp } from './app.ts';
import { CREATE_BODY, emailMessage, WEBHOOK_COUNT } from './shared.ts';

const { values: args } = parseArgs({
  options: {
    requests: { type: 'string', default: '20000' },
    rounds: { type: 'string', default: '3' },
    excerpts: { type: 'boolean', default: false },
    // The bound of an answer's excerpt, in bytes (default API_LOG_WRITING.answerBytes): what a row's size costs.
    'answer-bytes': { type: 'string' },
  },
});
const REQUESTS = Number(args.requests);
const ROUNDS = Number(args.rounds);
// (A checkout from before answerBytes excerpted answers to bodyBytes: the same bench runs on it, for before/after.)
const ANSWER_BYTES = Number(
  args['answer-bytes'] ??
    (API_LOG_WRITING as { answerBytes?: number }).answerBytes ??
    API_LOG_WRITING.bodyBytes,
);

// The real app makes the list's answer as `GET /v1/webhooks` sends it; its own logs are not measured.
const bench = await startBenchApp({
  databaseUrl: process.env.DATABASE_URL,
  schemaPrefix: 'bench_api_logs',
  config: { apiLogMaxRows: 0 },
});
try {
  const headers = { authorization: `Bearer ${bench.key}` };
  for (let i = 0; i < WEBHOOK_COUNT; i++) {
    const made = await bench.app.inject({
      method: 'POST',
      url: '/v1/webhooks',
      headers,
      payload: { ...CREATE_BODY, url: `${CREATE_BODY.url}/${i}` },
    });
    if (made.statusCode !== 201) throw new Error(`setup: create answered ${made.statusCode}`);
  }
  const listed = await bench.app.inject({ method: 'GET', url: '/v1/webhooks', headers });
  if (listed.statusCode !== 200) throw new Error(`setup: list answered ${listed.statusCode}`);
  const list = listed.body;
  const repo = createApiLogRepo(bench.database.db, bench.database.engine);

  const base = {
    projectId: bench.projectId,
    keyId: 'key_01jdbench0000000000000000',
    durationMs: 0.4,
    userAgent: 'autocannon',
  };
  const listEntry = (answer: string): ApiLogEntry => ({
    ...base,
    method: 'GET',
    path: '/v1/webhooks',
    status: 200,
    at: new Date(),
    requestBody: undefined,
    responseBody: answer,
  });
  const kinds: Record<string, (i: number) => ApiLogEntry> = {
    // What the accepted-send bench's requests leave: its body, and the 202's answer as serialized.
    send: (i) => ({
      ...base,
      method: 'POST',
      path: '/v1/emails',
      status: 202,
      at: new Date(),
      requestBody: emailMessage(i),
      responseBody: JSON.stringify({
        object: 'email',
        id: newId('msg'),
        status: 'queued',
        to: [`user${i}@example.org`],
      }),
    }),
    // What the read bench's requests leave: no body, the same serialized page each time.
    [`list of ${WEBHOOK_COUNT} webhooks (${list.length} chars), the same page`]: () => listEntry(list),
    // The same, a page of other text each time (no two answers alike, as a list whose items change would be).
    [`list of ${WEBHOOK_COUNT} webhooks, a page of its own each time`]: (i) =>
      listEntry(list.replace('"object":"list"', `"object":"list","n":${i}`)),
  };
  const perRequest = (usage: NodeJS.CpuUsage, n = REQUESTS) => (usage.user + usage.system) / n;

  for (const [kind, entry] of Object.entries(kinds)) {
    const entries = Array.from({ length: REQUESTS }, (_, i) => entry(i));
    for (let round = 1; round <= ROUNDS; round += 1) {
      if (args.excerpts) {
        const start = process.cpuUsage();
        let bytes = 0;
        for (const one of entries) {
          bytes += excerptOf(one.requestBody, API_LOG_WRITING.bodyBytes)?.length ?? 0;
          bytes += excerptOfAnswer(one.responseBody as string, ANSWER_BYTES)?.length ?? 0;
        }
        console.log(
          `round ${round}, ${kind}: excerpts ${perRequest(process.cpuUsage(start)).toFixed(2)} µs CPU a ` +
            `request (${(bytes / REQUESTS).toFixed(0)} chars kept)`,
        );
        continue;
      }
      const recorder = createApiLogRecorder({ repo, writing: { answerBytes: ANSWER_BYTES } });
      const pushStart = process.cpuUsage();
      for (const one of entries) recorder.record(one);
      const push = process.cpuUsage(pushStart);
      const writeStart = process.cpuUsage();
      const wall = performance.now();
      await recorder.flush();
      const write = process.cpuUsage(writeStart);
      console.log(
        `round ${round}, ${bench.database.engine}, ${kind}, answers' excerpts ${ANSWER_BYTES} B: ${REQUESTS} logs; push ${perRequest(push).toFixed(2)} ` +
          `µs CPU a request, excerpts and INSERT ${perRequest(write).toFixed(1)} µs CPU a request (batches of ` +
          `${API_LOG_WRITING.maxBatch}; ${((performance.now() - wall) / (REQUESTS / API_LOG_WRITING.maxBatch)).toFixed(1)} ms wall a batch)`,
      );
    }
  }
} finally {
  await bench.close();
  await bench.remove();
}
