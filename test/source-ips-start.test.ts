import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { ALL_ENGINES, engineSkip } from './helpers/app.ts';
import {
  createProcessDatabase,
  runFailingServer,
  startServerProcess,
  startWorkerProcess,
} from './helpers/process.ts';

// Issue 38: a process that sends mail directly binds each DIRECT_SOURCE_IPS address at its start, and refuses
// to start, naming the address, when the machine does not have it (else every attempt from it would fail
// with EADDRNOTAVAIL). 127.0.0.2 is on Linux's loopback; 192.0.2.1 (TEST-NET-1) is on no machine.

const ENCRYPTION_KEY = 'ef'.repeat(32);
const REFUSED =
  'DIRECT_SOURCE_IPS lists 192.0.2.1, which mail cannot be sent from on this machine (EADDRNOTAVAIL): ' +
  'assign the address to an interface here, or remove it from the list.';

for (const engine of ALL_ENGINES) {
  describe(`DIRECT_SOURCE_IPS checked at the start (${engine})`, { skip: engineSkip(engine) }, () => {
    test('an address the machine does not have: the server and the worker refuse to start, writing nothing', async (t) => {
      const own = await createProcessDatabase(engine);
      // On SQLite an empty data directory, as on a first start: not even the database file may appear.
      const dataDir = mkdtempSync(path.join(tmpdir(), 'postwire-source-ips-'));
      t.after(async () => {
        rmSync(dataDir, { recursive: true, force: true });
        await own.cleanup();
      });
      const env = {
        ...own.env,
        POSTWIRE_DATA_DIR: dataDir,
        POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY,
        MAIL_TRANSPORT: 'direct',
        DIRECT_SOURCE_IPS: '127.0.0.2 helo=mx1.example.com; 192.0.2.1 helo=mx2.example.com',
      };

      const server = await runFailingServer(env);
      assert.equal(server.code, 1);
      assert.equal(server.stderr, `Postwire could not start: ${REFUSED}\n`);
      assert.equal(server.stdout, '', 'no key box, no log line');

      const worker = await runFailingServer(env, ['src/cli.ts', 'worker']);
      assert.equal(worker.code, 1);
      assert.equal(worker.stderr, `postwire: ${REFUSED}\n`);
      assert.equal(worker.stdout, '');
      assert.deepEqual(readdirSync(dataDir), [], 'no database file');
      if (engine === 'postgres') {
        const { db } = own.database.handle;
        assert.deepEqual(await db.selectFrom('api_keys').select('id').execute(), []);
      }
    });

    test('addresses it has: it starts; a process that sends nothing, or not directly, does not check', async (t) => {
      const own = await createProcessDatabase(engine);
      t.after(() => own.cleanup());
      const env = { ...own.env, POSTWIRE_ENCRYPTION_KEY: ENCRYPTION_KEY, MAIL_TRANSPORT: 'direct' };

      const worker = await startWorkerProcess({ ...env, DIRECT_SOURCE_IPS: '127.0.0.2; 127.0.0.1' });
      t.after(() => worker.kill());
      assert.equal(await worker.stop(), 0);

      // The API alone (`serve --no-worker`) sends nothing; in capture mode no address is used.
      const unused = '192.0.2.1';
      const api = await startServerProcess({ ...env, DIRECT_SOURCE_IPS: unused }, [
        'src/cli.ts',
        'serve',
        '--no-worker',
      ]);
      t.after(() => api.kill());
      assert.equal(await api.stop(), 0);
      const capturing = await startWorkerProcess({
        ...env,
        MAIL_TRANSPORT: 'capture',
        DIRECT_SOURCE_IPS: unused,
      });
      t.after(() => capturing.kill());
      assert.equal(await capturing.stop(), 0);
    });
  });
}
