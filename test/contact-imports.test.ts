import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { QueueWorker } from '../src/queue/runtime.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { assertApiError } from './helpers/answers.ts';
import { contactImportWorker, uploadImport } from './helpers/contact-imports.ts';

// Contact imports under /v1: a CSV uploaded as multipart/form-data (as Resend's SDK sends it), checked as it
// arrives, then imported by the import worker; what GET shows of the job, row by row; bad files and bad maps
// refused with nothing stored; update against skip; tenants and scoped keys.

/** A spreadsheet's CSV: a BOM, CRLF, quoted fields with commas, quotes and a line break, Unicode names. */
const CSV = [
  '\uFEFFE-mail,Given,Family,Opted out,Plan,Seats',
  'ada@example.org,Ada,"Lovelace, Countess",no,pro,5',
  '"OLD@Example.org",Oldřich,,,"multi\r\nline ""plan""",',
  'not-an-address,X,Y,no,free,1',
  'bob@example.org,Bob',
  'carol@example.org,张伟,Ōtake,yes,free,many',
  'dave@example.org,Dave,,TRUE,,',
  'ada@example.org,Ada Augusta,,,,',
].join('\r\n');

const MAP = {
  email: 'E-mail',
  first_name: 'Given',
  last_name: 'Family',
  unsubscribed: 'Opted out',
  properties: { plan: 'Plan', seats: { column: 'Seats', type: 'number' } },
};

const ERRORS = [
  { row: 3, reason: "'not-an-address' is not an email address." },
  { row: 4, reason: 'The row has 2 columns; the header has 6.' },
  { row: 5, reason: "'seats' is a number property: 'many' is not a number." },
];

for (const engine of ALL_ENGINES) {
  describe(`contact imports (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let worker: QueueWorker;
    let segmentId: string;
    let topicId: string;

    before(async () => {
      api = await startTestApp(engine);
      worker = contactImportWorker(api);
      await worker.start();
      await api.request('POST', '/v1/contact-properties', { body: { key: 'plan', type: 'string' } });
      await api.request('POST', '/v1/contact-properties', { body: { key: 'seats', type: 'number' } });
      segmentId = (await api.request('POST', '/v1/segments', { body: { name: 'Imported' } })).body.id;
      topicId = (
        await api.request('POST', '/v1/topics', {
          body: { name: 'News', default_subscription: 'opt_out' },
        })
      ).body.id;
    });
    after(async () => {
      await worker.stop();
      await api.close();
    });

    const upload = (csv: string, fields: Record<string, unknown> = {}, key: string = api.key) =>
      uploadImport(api, csv, fields, key);

    /** Uploads, waits for the worker to finish the job, and answers the job as GET shows it. */
    async function imported(csv: string, fields: Record<string, unknown>) {
      const accepted = await upload(csv, fields);
      assert.equal(accepted.status, 202, JSON.stringify(accepted.body));
      await worker.whenIdle();
      const job = await api.request('GET', `/v1/contacts/imports/${accepted.body.id}`);
      assert.equal(job.status, 200);
      return { accepted: accepted.body, job: job.body };
    }

    const contact = async (email: string) => (await api.request('GET', `/v1/contacts/${email}`)).body;

    test('imports with a column map: created, updated, failed rows reported with their number', async () => {
      await api.request('POST', '/v1/contacts', { body: { email: 'old@example.org', first_name: 'Old' } });
      const { accepted, job } = await imported(CSV, {
        column_map: MAP,
        on_conflict: 'update',
        segments: [{ id: segmentId }],
        topics: [{ id: topicId, subscription: 'opt_in' }],
      });
      assert.match(accepted.id, /^cimp_[0-9a-z]{26}$/);
      assert.equal(accepted.status, 'queued');
      assert.deepEqual(accepted.counts, { total: 7, read: 0, created: 0, updated: 0, skipped: 0, failed: 0 });
      assert.equal(job.status, 'completed');
      assert.deepEqual(job.counts, { total: 7, read: 7, created: 2, updated: 2, skipped: 0, failed: 3 });
      assert.deepEqual(job.errors, ERRORS);
      assert.equal(job.failure, null);
      assert.ok(job.started_at && job.completed_at);

      const ada = await contact('ada@example.org');
      assert.equal(ada.first_name, 'Ada Augusta', 'the later row of an address updates the earlier');
      assert.equal(ada.last_name, 'Lovelace, Countess', 'an empty cell keeps the value');
      assert.equal(ada.unsubscribed, false);
      assert.deepEqual(ada.properties, { plan: 'pro', seats: 5 });
      const old = await contact('old@example.org');
      assert.equal(old.first_name, 'Oldřich');
      assert.deepEqual(old.properties, { plan: 'multi\r\nline "plan"' });
      const dave = await contact('dave@example.org');
      assert.equal(dave.unsubscribed, true);
      assert.equal((await api.request('GET', '/v1/contacts/carol@example.org')).status, 404);
      assert.equal((await api.request('GET', '/v1/contacts/bob@example.org')).status, 404);

      const members = await api.request('GET', `/v1/segments/${segmentId}/contacts`);
      assert.deepEqual(members.body.data.map((each: { email: string }) => each.email).sort(), [
        'ada@example.org',
        'dave@example.org',
        'old@example.org',
      ]);
      const subscribed = await api.request('GET', `/v1/contacts?topic_id=${topicId}`);
      assert.equal(subscribed.body.data.length, 3);
      const events = await api.request('GET', '/v1/events?type=contact.created&limit=100');
      const createdEmails = events.body.data.map((event: { data: { email: string } }) => event.data.email);
      assert.ok(createdEmails.includes('dave@example.org'), JSON.stringify(createdEmails));

      const listed = await api.request('GET', '/v1/contacts/imports?status=completed');
      assert.deepEqual(
        listed.body.data.map((each: { id: string }) => each.id),
        [accepted.id],
      );
    });

    test('on_conflict skip leaves the project’s contacts as they are', async () => {
      const before = await contact('ada@example.org');
      const { job } = await imported(CSV, { column_map: MAP, on_conflict: 'skip' });
      assert.deepEqual(job.counts, { total: 7, read: 7, created: 0, updated: 0, skipped: 4, failed: 3 });
      assert.deepEqual(job.errors, ERRORS);
      assert.deepEqual(await contact('ada@example.org'), before);
    });

    test('without a map, columns are found by name; LF line ends', async () => {
      const { job } = await imported('email,First Name,plan\nerin@example.org,Erin,basic\n', {});
      assert.deepEqual(job.counts, { total: 1, read: 1, created: 1, updated: 0, skipped: 0, failed: 0 });
      const erin = await contact('erin@example.org');
      assert.equal(erin.first_name, 'Erin');
      assert.deepEqual(erin.properties, { plan: 'basic' });
    });

    test('a file that is not CSV, a bad map or a bad option: a clear 4xx, nothing stored', async () => {
      const before = await api.rowCounts();
      assertApiError(
        await upload('email,name\n"ada@example.org,Ada\n', { column_map: { email: 'email' } }),
        400,
        'invalid_csv',
        'The file is not CSV at row 1: a quoted field is not closed.',
        'file',
      );
      assertApiError(
        await upload('email,name\nada@example.org,Ada\n', { column_map: { email: 'Email' } }),
        422,
        'invalid_column_map',
        "The column map names 'Email' for email, which the header does not have. Header: email, name.",
        'column_map.email',
      );
      assertApiError(
        await upload('email,name\nada@example.org,Ada\n', {
          column_map: { email: 'email', properties: { tier: 'name' } },
        }),
        422,
        'invalid_column_map',
        "'tier' is not a declared contact property; declare it first (POST /v1/contact-properties). Declared: plan, seats.",
        'column_map.properties.tier',
      );
      assertApiError(
        await upload('name\nAda\n'),
        422,
        'invalid_column_map',
        "The header has no 'email' column; name it so, or send a column_map. Header: name.",
        'column_map.email',
      );
      assertApiError(
        await upload('email,email\na@example.org,b@example.org\n'),
        422,
        'invalid_column_map',
        "The header names the column 'email' twice.",
        'file',
      );
      assertApiError(
        await upload(''),
        400,
        'invalid_csv',
        'The file is empty: it needs a header row.',
        'file',
      );
      assertApiError(
        await upload('email\na@example.org\n', { on_conflict: 'merge' }),
        422,
        'parameter_invalid',
        "on_conflict is update (or upsert) or skip, not 'merge'.",
        'on_conflict',
      );
      const other = await api.createProject('other');
      const theirs = await api.request('POST', '/v1/segments', { key: other.key, body: { name: 'Theirs' } });
      assertApiError(
        await upload('email\na@example.org\n', { segments: [theirs.body.id] }),
        404,
        'resource_missing',
        `No segment with id '${theirs.body.id}'.`,
        'id',
      );
      assertApiError(
        await api.request('POST', '/v1/contacts/imports', { body: {} }),
        415,
        'unsupported_media_type',
        'Send the import as multipart/form-data, with the CSV in a part named file.',
      );
      const after = await api.rowCounts();
      delete after.segments;
      delete before.segments;
      delete after.projects;
      delete before.projects;
      delete after.api_keys;
      delete before.api_keys;
      assert.deepEqual(after, before, 'no job, no pieces, no contact');
    });

    test('export: streamed CSV with properties, filtered by segment; imports back as it was', async () => {
      const exported = await fetch(`${api.baseUrl}/v1/contacts/export?segment_id=${segmentId}`, {
        headers: { authorization: `Bearer ${api.key}` },
      });
      assert.equal(exported.status, 200);
      assert.equal(exported.headers.get('content-type'), 'text/csv; charset=utf-8');
      const text = await exported.text();
      const header = 'email,first_name,last_name,unsubscribed,plan,seats,id,created_at,updated_at';
      const ada = await contact('ada@example.org');
      const old = await contact('old@example.org');
      const dave = await contact('dave@example.org');
      const times = (each: { id: string; created_at: string; updated_at: string }) =>
        `${each.id},${each.created_at},${each.updated_at}`;
      const lineOf: Record<string, string> = {
        [ada.id]: `ada@example.org,Ada Augusta,"Lovelace, Countess",false,pro,5,${times(ada)}`,
        [old.id]: `old@example.org,Oldřich,,false,"multi\r\nline ""plan""",,${times(old)}`,
        [dave.id]: `dave@example.org,Dave,,true,,,${times(dave)}`,
      };
      const rows = [old, ada, dave].sort((a, b) => (a.id < b.id ? -1 : 1));
      assert.equal(
        text,
        [header, ...rows.map((each) => lineOf[each.id])].map((line) => `${line}\r\n`).join(''),
      );

      // Into another project with the same properties, without a map: the same contacts.
      const other = await api.createProject('round trip');
      await api.request('POST', '/v1/contact-properties', {
        key: other.key,
        body: { key: 'plan', type: 'string' },
      });
      await api.request('POST', '/v1/contact-properties', {
        key: other.key,
        body: { key: 'seats', type: 'number' },
      });
      const accepted = await upload(text, {}, other.key);
      assert.equal(accepted.status, 202, JSON.stringify(accepted.body));
      await worker.whenIdle();
      const job = await api.request('GET', `/v1/contacts/imports/${accepted.body.id}`, { key: other.key });
      assert.deepEqual(job.body.counts, { total: 3, read: 3, created: 3, updated: 0, skipped: 0, failed: 0 });
      for (const each of rows) {
        const copy = (await api.request('GET', `/v1/contacts/${each.email}`, { key: other.key })).body;
        const strip = ({ id: _id, created_at: _c, updated_at: _u, ...rest }: typeof ada) => rest;
        assert.deepEqual(strip(copy), strip(each));
      }

      const theirs = await fetch(`${api.baseUrl}/v1/contacts/export?segment_id=${segmentId}`, {
        headers: { authorization: `Bearer ${other.key}` },
      });
      assert.equal(theirs.status, 404, 'another project’s segment');
      const prefixed = await fetch(`${api.baseUrl}/v1/contacts/export?email_prefix=ERIN`, {
        headers: { authorization: `Bearer ${api.key}` },
      });
      assert.match(
        await prefixed.text(),
        /^email,.*\r\nerin@example\.org,Erin,,false,basic,,con_[^\r]*\r\n$/,
      );
    });

    test('tenants and scoped keys: another project’s import is a 404; read_only reads, cannot import', async () => {
      const { accepted } = await imported('email\nfrank@example.org\n', {});
      const other = await api.createProject('another');
      const theirs = await api.request('GET', `/v1/contacts/imports/${accepted.id}`, { key: other.key });
      assertApiError(theirs, 404, 'resource_missing', `No contact import with id '${accepted.id}'.`, 'id');
      const listed = await api.request('GET', '/v1/contacts/imports', { key: other.key });
      assert.deepEqual(listed.body.data, []);
      const readOnly = (
        await api.request('POST', '/v1/api-keys', { body: { name: 'ro', permission: 'read_only' } })
      ).body.token;
      assert.equal(
        (await api.request('GET', `/v1/contacts/imports/${accepted.id}`, { key: readOnly })).status,
        200,
      );
      const exported = await fetch(`${api.baseUrl}/v1/contacts/export`, {
        headers: { authorization: `Bearer ${readOnly}` },
      });
      assert.equal(exported.status, 200);
      assert.match(await exported.text(), /\r\nfrank@example\.org,/);
      const refused = await upload('email\ngina@example.org\n', {}, readOnly);
      assert.equal(refused.status, 403);
      assert.equal(refused.body.error.code, 'insufficient_permission');
    });
  });
}
