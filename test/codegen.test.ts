import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import openapiTS, { astToString } from 'openapi-typescript';
import { startTestApp, type TestApp } from './helpers/app.ts';

// What a new integrator does with the document: generate types with openapi-typescript, write a client with
// openapi-fetch, compile it strictly, run it against the server.
const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '..');

const PROGRAM = `
import createClient from 'openapi-fetch';
import type { components, paths, webhooks } from './api.ts';

type Webhook = components['schemas']['Webhook'];
type EventType = components['schemas']['EventType'];
type Delivered = webhooks['email.delivered']['post']['requestBody']['content']['application/json'];

const [baseUrl, key] = process.argv.slice(2) as [string, string];
const client = createClient<paths>({ baseUrl, headers: { Authorization: \`Bearer \${key}\` } });

const kind: EventType = 'email.delivered';
const created = await client.POST('/v1/webhooks', {
  body: { url: 'https://hooks.example.com/in', events: [kind] },
});
if (!created.data) throw new Error(created.error?.error.message);
const hook: Webhook = created.data.data;

// No parameters at all: limit has a default, so it is optional.
const listed = await client.GET('/v1/webhooks');
const ids: string[] = (listed.data?.data ?? []).map((item: Webhook) => item.id);

const missing = await client.GET('/v1/webhooks/{webhook_id}', { params: { path: { webhook_id: 'wh_nope' } } });
const code: string | undefined = missing.error?.error.code;

const sample: Delivered = {
  id: 'evt_1',
  type: 'email.delivered',
  created_at: '2026-11-23T10:00:00.000Z',
  data: { email_id: 'msg_1', from: 'a@example.com', to: ['b@example.org'], subject: 's', tags: {}, recipient: 'b@example.org' },
};
console.log(JSON.stringify({ hook: hook.id, ids, code, status: missing.response.status, sample: sample.type }));
`;

// A line that must not compile: proves the types are not \`any\`.
const WRONG = `
import createClient from 'openapi-fetch';
import type { paths } from './api.ts';
const client = createClient<paths>({ baseUrl: 'http://127.0.0.1' });
await client.POST('/v1/webhooks', { body: { url: 'https://x.example', events: ['email.exploded'] } });
`;

describe('a client generated from the document', () => {
  let api: TestApp;
  let dir: string;

  before(async () => {
    api = await startTestApp('sqlite');
    const doc = (await api.request('GET', '/v1/openapi.json', { key: null })).body;
    dir = mkdtempSync(path.join(tmpdir(), 'postwire-codegen-'));
    // The program resolves openapi-fetch from the project, as it would from its own node_modules.
    symlinkSync(path.join(root, 'node_modules'), path.join(dir, 'node_modules'));
    writeFileSync(path.join(dir, 'api.ts'), astToString(await openapiTS(doc)));
    writeFileSync(
      path.join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'es2024',
          module: 'nodenext',
          moduleResolution: 'nodenext',
          allowImportingTsExtensions: true,
          noEmit: true,
          strict: true,
          noUncheckedIndexedAccess: true,
          types: ['node'],
        },
        include: ['program.ts', 'wrong.ts', 'api.ts'],
      }),
    );
    writeFileSync(path.join(dir, 'package.json'), '{ "type": "module" }');
  });
  after(async () => {
    await api.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('compiles strictly, including GET /v1/webhooks with no parameters, and works', async () => {
    writeFileSync(path.join(dir, 'program.ts'), PROGRAM);
    writeFileSync(path.join(dir, 'wrong.ts'), WRONG);
    // One compiler run for both files (it takes seconds): the only error must be wrong.ts's unknown kind,
    // which proves the types are not \`any\`.
    const tsc = run(process.execPath, [path.join(root, 'node_modules/typescript/bin/tsc'), '-p', dir], {
      cwd: dir,
    });
    const errors = await tsc.then(
      () => '',
      (error: { stdout: string }) => error.stdout,
    );
    const lines = errors.split('\n').filter((line) => /error TS/.test(line));
    assert.equal(lines.length, 1, errors);
    assert.match(lines[0]!, /(^|\/)wrong\.ts\(5,.*'"email\.exploded"' is not assignable/);

    const { stdout } = await run(process.execPath, [path.join(dir, 'program.ts'), api.baseUrl, api.key]);
    const result = JSON.parse(stdout);
    assert.match(result.hook, /^wh_/);
    assert.deepEqual(result.ids, [result.hook]);
    assert.deepEqual(
      { code: result.code, status: result.status, sample: result.sample },
      { code: 'resource_missing', status: 404, sample: 'email.delivered' },
    );
  });
});
