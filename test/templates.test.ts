import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';

const TIMESTAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const TEMPLATE_ID = /^tpl_[0-9a-z]{26}$/;

const TEMPLATE_KEYS = [
  'object',
  'id',
  'name',
  'alias',
  'subject',
  'html',
  'text',
  'variables',
  'variable_defaults',
  'created_at',
  'updated_at',
  'published_at',
  'published_version',
  'has_unpublished_changes',
];

/** The template with its id and timestamps replaced, after checking their shapes. */
function stable(template: any) {
  assert.deepEqual(Object.keys(template), TEMPLATE_KEYS);
  assert.match(template.id, TEMPLATE_ID);
  assert.match(template.created_at, TIMESTAMP);
  assert.match(template.updated_at, TIMESTAMP);
  if (template.published_at !== null) assert.match(template.published_at, TIMESTAMP);
  return {
    ...template,
    id: 'ID',
    created_at: 'T',
    updated_at: 'T',
    published_at: template.published_at === null ? null : 'T',
  };
}

for (const engine of ALL_ENGINES) {
  describe(`templates (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    before(async () => {
      api = await startTestApp(engine);
    });
    after(() => api.close());

    const create = (body: unknown, key?: string) =>
      api.request('POST', '/v1/templates', { body, ...(key ? { key } : {}) });
    const createOk = async (body: Record<string, unknown>, key?: string) => {
      const response = await create(body, key);
      assert.equal(response.status, 201, JSON.stringify(response.body));
      return response.body;
    };
    const errorOf = (response: { body: any }) => {
      const { request_id, ...error } = response.body.error;
      assert.match(request_id, /^req_/);
      return error;
    };
    const draftRow = (id: string) =>
      api.database.handle.db.selectFrom('templates').selectAll().where('id', '=', id).executeTakeFirst();

    test('create answers 201 with the whole template record', async () => {
      const response = await create({
        name: 'Welcome',
        alias: 'welcome',
        subject: 'Hi {{ name }}',
        html: '<p>Hello {{ name }}</p>',
        text: 'Hello {{ name }}',
        variables: ['name', 'account.plan', 'name'],
      });
      assert.equal(response.status, 201);
      assert.match(response.headers.get('content-type') ?? '', /^application\/json/);
      assert.equal(response.body.updated_at, response.body.created_at);
      assert.deepEqual(stable(response.body), {
        object: 'template',
        id: 'ID',
        name: 'Welcome',
        alias: 'welcome',
        subject: 'Hi {{ name }}',
        html: '<p>Hello {{ name }}</p>',
        text: 'Hello {{ name }}',
        variables: ['name', 'account.plan'],
        variable_defaults: {},
        created_at: 'T',
        updated_at: 'T',
        published_at: null,
        published_version: null,
        has_unpublished_changes: true,
      });
    });

    test('only name is required; the rest is null or empty', async () => {
      const body = await createOk({ name: 'Bare' });
      assert.deepEqual(stable(body), {
        object: 'template',
        id: 'ID',
        name: 'Bare',
        alias: null,
        subject: null,
        html: null,
        text: null,
        variables: [],
        variable_defaults: {},
        created_at: 'T',
        updated_at: 'T',
        published_at: null,
        published_version: null,
        has_unpublished_changes: true,
      });
    });

    test('get by id and by alias answer the same record', async () => {
      const created = await createOk({ name: 'Receipt', alias: 'receipt-v1_a', html: '<p>x</p>' });
      const byId = await api.request('GET', `/v1/templates/${created.id}`);
      assert.equal(byId.status, 200);
      assert.deepEqual(byId.body, created);
      const byAlias = await api.request('GET', '/v1/templates/receipt-v1_a');
      assert.equal(byAlias.status, 200);
      assert.deepEqual(byAlias.body, created);
    });

    test('an unknown id, a malformed id and an unknown alias are 404', async () => {
      for (const id of [
        'tpl_01h455vb4pex5vsknk084sn02q',
        'wh_01h455vb4pex5vsknk084sn02q',
        'no-such-alias',
        'BAD!',
      ]) {
        const response = await api.request('GET', `/v1/templates/${encodeURIComponent(id)}`);
        assert.equal(response.status, 404, id);
        assert.deepEqual(errorOf(response), {
          code: 'resource_missing',
          message: `No template with id '${id}'.`,
          param: 'id',
        });
      }
    });

    test('list: newest first, limit, after and before cursors', async () => {
      const other = await api.createProject('List project');
      const ids: string[] = [];
      for (const name of ['one', 'two', 'three']) ids.push((await createOk({ name }, other.key)).id);
      const [one, two, three] = ids;

      const all = await api.request('GET', '/v1/templates', { key: other.key });
      assert.equal(all.status, 200);
      assert.deepEqual(Object.keys(all.body), ['object', 'data', 'has_more']);
      assert.equal(all.body.object, 'list');
      assert.equal(all.body.has_more, false);
      assert.deepEqual(
        all.body.data.map((t: any) => [t.id, t.name]),
        [
          [three, 'three'],
          [two, 'two'],
          [one, 'one'],
        ],
      );
      for (const template of all.body.data) stable(template);

      const first = await api.request('GET', '/v1/templates?limit=2', { key: other.key });
      assert.deepEqual(
        first.body.data.map((t: any) => t.id),
        [three, two],
      );
      assert.equal(first.body.has_more, true);

      const next = await api.request('GET', `/v1/templates?limit=2&after=${two}`, { key: other.key });
      assert.deepEqual(
        next.body.data.map((t: any) => t.id),
        [one],
      );
      assert.equal(next.body.has_more, false);

      const back = await api.request('GET', `/v1/templates?limit=1&before=${one}`, { key: other.key });
      assert.deepEqual(
        back.body.data.map((t: any) => t.id),
        [two],
      );
      assert.equal(back.body.has_more, true);

      const badLimit = await api.request('GET', '/v1/templates?limit=0', { key: other.key });
      assert.equal(badLimit.status, 422);
      assert.equal(errorOf(badLimit).param, 'limit');
      const both = await api.request('GET', `/v1/templates?after=${one}&before=${two}`, { key: other.key });
      assert.equal(both.status, 422);
      assert.equal(errorOf(both).param, 'before');
    });

    test('patch changes only the fields sent; null clears alias, subject, html and text', async () => {
      const created = await createOk({
        name: 'Patch me',
        alias: 'patch-me',
        subject: 'S',
        html: '<p>H</p>',
        text: 'T',
        variables: ['a'],
      });
      const renamed = await api.request('PATCH', '/v1/templates/patch-me', { body: { name: 'Patched' } });
      assert.equal(renamed.status, 200);
      assert.equal(renamed.body.created_at, created.created_at);
      assert.ok(renamed.body.updated_at > created.updated_at, 'updated_at moves on a change');
      assert.deepEqual({ ...renamed.body, updated_at: created.updated_at }, { ...created, name: 'Patched' });

      const cleared = await api.request('PATCH', `/v1/templates/${created.id}`, {
        body: { alias: null, subject: null, html: null, variables: ['b', 'c'] },
      });
      assert.equal(cleared.status, 200);
      assert.ok(cleared.body.updated_at > renamed.body.updated_at);
      assert.deepEqual(
        { ...cleared.body, updated_at: 'T' },
        {
          ...created,
          name: 'Patched',
          alias: null,
          subject: null,
          html: null,
          variables: ['b', 'c'],
          updated_at: 'T',
        },
      );
      assert.equal((await api.request('GET', '/v1/templates/patch-me')).status, 404);
      assert.deepEqual((await api.request('GET', `/v1/templates/${created.id}`)).body, cleared.body);

      const empty = await api.request('PATCH', `/v1/templates/${created.id}`, { body: {} });
      assert.equal(empty.status, 422);
      assert.deepEqual(errorOf(empty), {
        code: 'parameter_missing',
        message: 'Send at least one of name, alias, subject, html, text, variables, variable_defaults.',
      });
    });

    test('delete answers the deleted shape and removes the template and its versions', async () => {
      const created = await createOk({ name: 'Doomed', alias: 'doomed', html: '<p>x</p>' });
      assert.equal((await api.request('POST', `/v1/templates/${created.id}/publish`)).status, 200);
      const before = await api.rowCounts();

      const deleted = await api.request('DELETE', '/v1/templates/doomed');
      assert.equal(deleted.status, 200);
      assert.deepEqual(deleted.body, { object: 'template', id: created.id, deleted: true });
      const counts = await api.rowCounts();
      assert.equal(counts.templates, before.templates! - 1);
      assert.equal(counts.template_versions, before.template_versions! - 1);

      assert.equal((await api.request('GET', `/v1/templates/${created.id}`)).status, 404);
      const again = await api.request('DELETE', `/v1/templates/${created.id}`);
      assert.equal(again.status, 404);
      assert.equal(errorOf(again).code, 'resource_missing');
      // The alias is free again.
      assert.equal((await create({ name: 'Reborn', alias: 'doomed' })).status, 201);
    });

    test('the seed example: publish with name, subject, html and text', async () => {
      const created = await createOk({ name: 'Draft' });
      const response = await api.request('POST', `/v1/templates/${created.id}/publish`, {
        body: {
          name: 'Order shipped',
          subject: 'Your order {{ order_id }} has shipped',
          html: '<p>Hi {{ name }}, order {{ order_id }} is on its way.</p>',
          text: 'Hi {{ name }}, order {{ order_id }} is on its way.',
        },
      });
      assert.equal(response.status, 200);
      assert.match(response.headers.get('content-type') ?? '', /^application\/json/);
      assert.deepEqual(Object.keys(response.body), ['object', 'id', 'published_at', 'version']);
      assert.match(response.body.published_at, TIMESTAMP);
      assert.deepEqual(
        { ...response.body, published_at: 'T' },
        { object: 'template', id: created.id, published_at: 'T', version: 1 },
      );

      const fetched = (await api.request('GET', `/v1/templates/${created.id}`)).body;
      assert.ok(fetched.updated_at > created.updated_at, 'the fields sent updated the draft');
      assert.deepEqual(stable(fetched), {
        object: 'template',
        id: 'ID',
        name: 'Order shipped',
        alias: null,
        subject: 'Your order {{ order_id }} has shipped',
        html: '<p>Hi {{ name }}, order {{ order_id }} is on its way.</p>',
        text: 'Hi {{ name }}, order {{ order_id }} is on its way.',
        variables: [],
        variable_defaults: {},
        created_at: 'T',
        updated_at: 'T',
        published_at: 'T',
        published_version: 1,
        has_unpublished_changes: false,
      });
      assert.equal(fetched.published_at, response.body.published_at);
    });

    test('40 parallel publishes of one template all succeed, with versions 1 to 40', async () => {
      const created = await api.request('POST', '/v1/templates', {
        body: { name: 'Busy', subject: 'S', html: '<p>{{ n }}</p>' },
      });
      const answers = await Promise.all(
        Array.from({ length: 40 }, (_, i) =>
          api.request('POST', `/v1/templates/${created.body.id}/publish`, { body: { subject: `S${i}` } }),
        ),
      );
      assert.deepEqual(
        answers.map((answer) => answer.status),
        Array(40).fill(200),
        JSON.stringify(answers.find((answer) => answer.status !== 200)?.body),
      );
      assert.deepEqual(
        answers.map((answer) => answer.body.version).sort((a, b) => a - b),
        Array.from({ length: 40 }, (_, i) => i + 1),
      );
      const versions = await api.request('GET', `/v1/templates/${created.body.id}/versions?limit=100`);
      assert.equal(versions.body.data.length, 40);
      // Each version holds the subject its own publish sent.
      for (const [i, answer] of answers.entries()) {
        const version = versions.body.data.find((v: any) => v.version === answer.body.version);
        assert.equal(version?.subject, `S${i}`, `version ${answer.body.version}`);
      }
    });

    test('publishing twice makes version 2; version 1 stays as it was', async () => {
      const created = await createOk({ name: 'Versioned', alias: 'versioned', html: '<p>v1</p>' });
      const first = await api.request('POST', '/v1/templates/versioned/publish', { body: {} });
      assert.equal(first.status, 200);
      assert.equal(first.body.version, 1);
      const unchangedDraft = (await api.request('GET', `/v1/templates/${created.id}`)).body;
      assert.equal(unchangedDraft.updated_at, created.updated_at, 'an empty publish leaves the draft alone');

      const second = await api.request('POST', `/v1/templates/${created.id}/publish`, {
        body: { html: '<p>v2</p>', subject: 'Two' },
      });
      assert.equal(second.status, 200);
      assert.deepEqual(
        { ...second.body, published_at: 'T' },
        { object: 'template', id: created.id, published_at: 'T', version: 2 },
      );
      assert.ok(second.body.published_at >= first.body.published_at);

      const versions = await api.request('GET', `/v1/templates/${created.id}/versions`);
      assert.equal(versions.status, 200);
      assert.deepEqual(versions.body, {
        object: 'list',
        data: [
          {
            object: 'template_version',
            template_id: created.id,
            version: 2,
            name: 'Versioned',
            subject: 'Two',
            html: '<p>v2</p>',
            text: null,
            variables: [],
            variable_defaults: {},
            published_at: second.body.published_at,
          },
          {
            object: 'template_version',
            template_id: created.id,
            version: 1,
            name: 'Versioned',
            subject: null,
            html: '<p>v1</p>',
            text: null,
            variables: [],
            variable_defaults: {},
            published_at: first.body.published_at,
          },
        ],
        has_more: false,
      });

      const page = await api.request('GET', '/v1/templates/versioned/versions?limit=1');
      assert.deepEqual(
        page.body.data.map((v: any) => v.version),
        [2],
      );
      assert.equal(page.body.has_more, true);
      const older = await api.request('GET', '/v1/templates/versioned/versions?limit=1&after=2');
      assert.deepEqual(older.body.data, [versions.body.data[1]]);
      assert.equal(older.body.has_more, false);
      const newer = await api.request('GET', '/v1/templates/versioned/versions?before=1');
      assert.deepEqual(newer.body.data, [versions.body.data[0]]);

      const one = await api.request('GET', `/v1/templates/${created.id}/versions/1`);
      assert.equal(one.status, 200);
      assert.deepEqual(one.body, versions.body.data[1]);
      const missing = await api.request('GET', `/v1/templates/${created.id}/versions/3`);
      assert.equal(missing.status, 404);
      assert.deepEqual(errorOf(missing), {
        code: 'resource_missing',
        message: `Template '${created.id}' has no version 3.`,
        param: 'version',
      });
      // Past the 32-bit version column: refused as input on every engine, never a database error.
      const huge = 2 ** 31;
      for (const [method, path, body] of [
        ['GET', `/v1/templates/${created.id}/versions/${huge}`, undefined],
        ['GET', `/v1/templates/${created.id}/versions?after=${huge}`, undefined],
        ['GET', `/v1/templates/${created.id}/versions?before=${huge}`, undefined],
        ['POST', `/v1/templates/${created.id}/render`, { version: huge }],
      ] as const) {
        const response = await api.request(method, path, body ? { body } : {});
        assert.equal(response.status, 422, `${method} ${path}`);
        assert.equal(errorOf(response).code, 'parameter_invalid');
      }

      const template = (await api.request('GET', `/v1/templates/${created.id}`)).body;
      assert.equal(template.published_version, 2);
      assert.equal(template.published_at, second.body.published_at);
      assert.equal(template.has_unpublished_changes, false);
    });

    test('publishing an unchanged draft answers the current version and stores no copy', async () => {
      const { id } = await createOk({ name: 'Same', subject: 'Hi', html: '<p>one</p>', variables: ['x'] });
      const first = await api.request('POST', `/v1/templates/${id}/publish`);
      assert.equal(first.status, 200);
      assert.equal(first.body.version, 1);
      const counts = await api.rowCounts();

      // No body, an empty body, and fields equal to the draft's: the same version, nothing written.
      for (const body of [undefined, {}, { name: 'Same', subject: 'Hi', html: '<p>one</p>' }]) {
        const again = await api.request('POST', `/v1/templates/${id}/publish`, body ? { body } : {});
        assert.equal(again.status, 200, JSON.stringify(again.body));
        assert.deepEqual(again.body, first.body, JSON.stringify(body));
      }
      assert.deepEqual(await api.rowCounts(), counts);
      const versions = await api.request('GET', `/v1/templates/${id}/versions`);
      assert.deepEqual(
        versions.body.data.map((version: { version: number }) => version.version),
        [1],
      );

      // A change after it makes a new version, through publish's body or a PATCH of the draft.
      const changed = await api.request('POST', `/v1/templates/${id}/publish`, {
        body: { html: '<p>two</p>' },
      });
      assert.equal(changed.status, 200);
      assert.equal(changed.body.version, 2);
      assert.ok(changed.body.published_at >= first.body.published_at);
      const repeated = await api.request('POST', `/v1/templates/${id}/publish`, {
        body: { html: '<p>two</p>' },
      });
      assert.deepEqual(repeated.body, changed.body);
      await api.request('PATCH', `/v1/templates/${id}`, { body: { variables: ['x', 'y'] } });
      const patched = await api.request('POST', `/v1/templates/${id}/publish`);
      assert.equal(patched.body.version, 3);
      // Back to an earlier version's content is still a change from the latest: a new version.
      const back = await api.request('POST', `/v1/templates/${id}/publish`, { body: { html: '<p>one</p>' } });
      assert.equal(back.body.version, 4);
      const template = (await api.request('GET', `/v1/templates/${id}`)).body;
      assert.equal(template.published_version, 4);
      assert.equal(template.has_unpublished_changes, false);
    });

    test('has_unpublished_changes follows the draft against the latest version', async () => {
      const { id } = await createOk({ name: 'Changes', text: 'a', variables: ['x'] });
      const flag = async () => (await api.request('GET', `/v1/templates/${id}`)).body.has_unpublished_changes;
      assert.equal(await flag(), true, 'never published');
      await api.request('POST', `/v1/templates/${id}/publish`);
      assert.equal(await flag(), false);
      await api.request('PATCH', `/v1/templates/${id}`, { body: { text: 'b' } });
      assert.equal(await flag(), true);
      await api.request('PATCH', `/v1/templates/${id}`, { body: { text: 'a' } });
      assert.equal(await flag(), false, 'back to the published content');
      await api.request('PATCH', `/v1/templates/${id}`, { body: { variables: ['x', 'y'] } });
      assert.equal(await flag(), true);
      await api.request('PATCH', `/v1/templates/${id}`, { body: { alias: 'changes-alias' } });
      const list = (await api.request('GET', '/v1/templates')).body.data.find((t: any) => t.id === id);
      assert.equal(list.has_unpublished_changes, true);
      await api.request('PATCH', `/v1/templates/${id}`, { body: { variables: ['x'] } });
      assert.equal(await flag(), false, 'the alias is not part of a version');
    });

    test('publish refuses bad Liquid, naming the field, and changes nothing', async () => {
      const created = await createOk({ name: 'Liquid', subject: 'ok', html: '<p>{{ name }}</p>' });
      const counts = await api.rowCounts();
      const row = await draftRow(created.id);

      const cases: [Record<string, string>, string, RegExp][] = [
        [{ html: '<p>{% if name %}unclosed</p>', name: 'Renamed' }, 'html', /tag \{% if name %\} not closed/],
        [{ subject: 'Hi {{ name ' }, 'subject', /output "\{\{ name " not closed/],
        [{ text: '{{ name | no_such_filter }}' }, 'text', /undefined filter: no_such_filter/],
        [{ html: '{% include "secrets" %}' }, 'html', /tag "include" not found/],
        [{ text: '{% render "/etc/passwd" %}' }, 'text', /tag "render" not found/],
      ];
      for (const [body, param, parserMessage] of cases) {
        const response = await api.request('POST', `/v1/templates/${created.id}/publish`, { body });
        assert.equal(response.status, 422, JSON.stringify(body));
        const error = errorOf(response);
        assert.equal(error.code, 'template_syntax_error');
        assert.equal(error.param, param);
        assert.ok(error.message.startsWith(`The ${param} is not valid Liquid: `), error.message);
        assert.match(error.message, parserMessage);
      }
      assert.deepEqual(await api.rowCounts(), counts);
      assert.deepEqual(await draftRow(created.id), row);
      assert.deepEqual((await api.request('GET', `/v1/templates/${created.id}`)).body, created);

      // A draft saved with bad Liquid is kept (drafts are work in progress) but cannot be published.
      const patched = await api.request('PATCH', `/v1/templates/${created.id}`, {
        body: { subject: '{% for %}' },
      });
      assert.equal(patched.status, 200);
      const refused = await api.request('POST', `/v1/templates/${created.id}/publish`);
      assert.equal(refused.status, 422);
      assert.equal(errorOf(refused).param, 'subject');
      assert.equal(errorOf(refused).code, 'template_syntax_error');
      assert.deepEqual(await api.rowCounts(), counts);
    });

    test('publish refuses a template with neither html nor text', async () => {
      const created = await createOk({ name: 'Empty', subject: 'Only a subject' });
      const counts = await api.rowCounts();
      for (const body of [undefined, {}, { html: '  ', name: 'Still empty' }]) {
        const response = await api.request('POST', `/v1/templates/${created.id}/publish`, { body });
        assert.equal(response.status, 422);
        assert.deepEqual(errorOf(response), {
          code: 'template_empty',
          message: 'A template needs an html or a text body (or both).',
        });
      }
      assert.deepEqual(await api.rowCounts(), counts);
      assert.deepEqual((await api.request('GET', `/v1/templates/${created.id}`)).body, created);

      const withText = await api.request('POST', `/v1/templates/${created.id}/publish`, {
        body: { text: 'Plain only' },
      });
      assert.equal(withText.status, 200);
      assert.equal(withText.body.version, 1);
    });

    test('publish refuses bad input with 422 and an unknown template with 404', async () => {
      const { id } = await createOk({ name: 'Publish input', html: '<p>x</p>' });
      const counts = await api.rowCounts();
      const cases: [unknown, string, string][] = [
        [{ name: 42 }, 'parameter_invalid', 'name'],
        [{ html: null }, 'parameter_invalid', 'html'],
        [{ name: '' }, 'parameter_invalid', 'name'],
        [{ alias: 'x' }, 'parameter_unknown', 'alias'],
        [{ subject: 's'.repeat(1001) }, 'parameter_invalid', 'subject'],
      ];
      for (const [body, code, param] of cases) {
        const response = await api.request('POST', `/v1/templates/${id}/publish`, { body });
        assert.equal(response.status, 422, JSON.stringify(body));
        assert.equal(errorOf(response).code, code);
        assert.equal(errorOf(response).param, param);
      }
      const missing = await api.request('POST', '/v1/templates/tpl_01h455vb4pex5vsknk084sn02q/publish');
      assert.equal(missing.status, 404);
      assert.equal(errorOf(missing).code, 'resource_missing');
      assert.deepEqual(await api.rowCounts(), counts);
    });

    test('create refuses bad fields with 422 naming the field, and stores nothing', async () => {
      await createOk({ name: 'Alias owner', alias: 'taken' });
      const counts = await api.rowCounts();
      const cases: [unknown, number, string, string][] = [
        [{}, 422, 'parameter_missing', 'name'],
        [{ subject: 'no name' }, 422, 'parameter_missing', 'name'],
        [{ name: 7 }, 422, 'parameter_invalid', 'name'],
        [{ name: null }, 422, 'parameter_invalid', 'name'],
        [{ name: '' }, 422, 'parameter_invalid', 'name'],
        [{ name: 'n'.repeat(201) }, 422, 'parameter_invalid', 'name'],
        [{ name: 'x', subject: 's'.repeat(1001) }, 422, 'parameter_invalid', 'subject'],
        [{ name: 'x', subject: ['s'] }, 422, 'parameter_invalid', 'subject'],
        [{ name: 'x', html: 'h'.repeat(512 * 1024 + 1) }, 422, 'parameter_invalid', 'html'],
        [{ name: 'x', text: 't'.repeat(512 * 1024 + 1) }, 422, 'parameter_invalid', 'text'],
        [{ name: 'x', text: true }, 422, 'parameter_invalid', 'text'],
        [{ name: 'x', unknown: 1 }, 422, 'parameter_unknown', 'unknown'],
        [{ name: 'x', id: 'tpl_01h455vb4pex5vsknk084sn02q' }, 422, 'parameter_unknown', 'id'],
        [{ name: 'x', alias: 'Has Capitals' }, 422, 'parameter_invalid', 'alias'],
        [{ name: 'x', alias: 'tpl_lookalike' }, 422, 'parameter_invalid', 'alias'],
        [{ name: 'x', alias: '' }, 422, 'parameter_invalid', 'alias'],
        [{ name: 'x', alias: 'a'.repeat(65) }, 422, 'parameter_invalid', 'alias'],
        [{ name: 'x', alias: 'dot.ted' }, 422, 'parameter_invalid', 'alias'],
        [{ name: 'x', variables: 'name' }, 422, 'parameter_invalid', 'variables'],
        [{ name: 'x', variables: ['ok', 3] }, 422, 'parameter_invalid', 'variables[1]'],
        [{ name: 'x', variables: ['{{ name }}'] }, 422, 'parameter_invalid', 'variables[0]'],
        [{ name: 'x', alias: 'taken' }, 409, 'alias_taken', 'alias'],
      ];
      for (const [body, status, code, param] of cases) {
        const response = await create(body);
        assert.equal(response.status, status, JSON.stringify(body).slice(0, 100));
        const error = errorOf(response);
        assert.equal(error.code, code, JSON.stringify(body).slice(0, 100));
        assert.equal(error.param, param, JSON.stringify(body).slice(0, 100));
      }
      assert.deepEqual(errorOf(await create({ name: 'x', alias: 'taken' })), {
        code: 'alias_taken',
        message: "Another template in this project already has the alias 'taken'.",
        param: 'alias',
      });
      assert.deepEqual(errorOf(await create({ subject: 'no name' })), {
        code: 'parameter_missing',
        message: "The field 'name' is required.",
        param: 'name',
      });
      assert.deepEqual(await api.rowCounts(), counts);

      // At the limits exactly, it is accepted.
      const largest = await create({
        name: 'n'.repeat(200),
        alias: 'a'.repeat(64),
        subject: 's'.repeat(1000),
        html: 'h'.repeat(512 * 1024),
      });
      assert.equal(largest.status, 201);
    });

    test('variable_defaults: declared, kept per version, changed by patch, used by render; bad ones refused', async () => {
      const created = await createOk({
        name: 'Defaults',
        subject: 'Hi {{ name }}',
        html: '<p>{{ name }}: {{ seats }}</p>',
        variables: ['name', 'seats'],
        variable_defaults: { seats: 1, name: 'friend' },
      });
      // In declaration order, whatever the order sent.
      assert.deepEqual(Object.entries(created.variable_defaults), [
        ['name', 'friend'],
        ['seats', 1],
      ]);
      const preview = await api.request('POST', `/v1/templates/${created.id}/render`, { body: {} });
      assert.equal(preview.status, 200);
      assert.deepEqual(
        [preview.body.subject, preview.body.html, preview.body.warnings],
        ['Hi friend', '<p>friend: 1</p>', []],
      );
      const published = await api.request('POST', `/v1/templates/${created.id}/publish`, { body: {} });
      assert.equal(published.status, 200);

      // Variables alone: the defaults of names still declared stay, the others go with their name.
      const patched = await api.request('PATCH', `/v1/templates/${created.id}`, {
        body: { variables: ['seats'] },
      });
      assert.equal(patched.status, 200);
      assert.deepEqual(patched.body.variable_defaults, { seats: 1 });
      assert.equal(patched.body.has_unpublished_changes, true);
      const replaced = await api.request('PATCH', `/v1/templates/${created.id}`, {
        body: { variable_defaults: { seats: 'a few' } },
      });
      assert.deepEqual(replaced.body.variable_defaults, { seats: 'a few' });
      const cleared = await api.request('PATCH', `/v1/templates/${created.id}`, {
        body: { variable_defaults: {} },
      });
      assert.deepEqual([cleared.body.variables, cleared.body.variable_defaults], [['seats'], {}]);
      // Version 1 keeps what it was published with.
      const version = await api.request('GET', `/v1/templates/${created.id}/versions/1`);
      assert.deepEqual(version.body.variable_defaults, { name: 'friend', seats: 1 });

      const counts = await api.rowCounts();
      const cases: [unknown, string, string][] = [
        [
          { name: 'x', variables: ['a'], variable_defaults: { a: true } },
          'parameter_invalid',
          'variable_defaults.a',
        ],
        [
          { name: 'x', variables: ['a'], variable_defaults: { a: { b: 1 } } },
          'parameter_invalid',
          'variable_defaults.a',
        ],
        [
          { name: 'x', variables: ['a'], variable_defaults: { a: null } },
          'parameter_invalid',
          'variable_defaults.a',
        ],
        [{ name: 'x', variables: ['a'], variable_defaults: [] }, 'parameter_invalid', 'variable_defaults'],
        [
          { name: 'x', variables: ['a'], variable_defaults: { b: 'x' } },
          'parameter_invalid',
          'variable_defaults.b',
        ],
        [{ name: 'x', variable_defaults: { a: 'x' } }, 'parameter_invalid', 'variable_defaults.a'],
      ];
      for (const [body, code, param] of cases) {
        const response = await create(body);
        assert.equal(response.status, 422, JSON.stringify(body));
        assert.deepEqual(
          [errorOf(response).code, errorOf(response).param],
          [code, param],
          JSON.stringify(body),
        );
      }
      assert.deepEqual(errorOf(await create(cases[4]![0])), {
        code: 'parameter_invalid',
        message: "'b' is not a declared variable: add it to variables to give it a default.",
        param: 'variable_defaults.b',
      });
      const patch = await api.request('PATCH', `/v1/templates/${created.id}`, {
        body: { variable_defaults: { seats: false } },
      });
      assert.deepEqual([patch.status, errorOf(patch).param], [422, 'variable_defaults.seats']);
      assert.deepEqual(await api.rowCounts(), counts);
    });

    test('patch refuses bad fields with 422 or 409 naming the field, and changes nothing', async () => {
      await createOk({ name: 'Holder', alias: 'held' });
      const target = await createOk({ name: 'Target', alias: 'target', html: '<p>t</p>' });
      const row = await draftRow(target.id);
      const cases: [unknown, number, string, string][] = [
        [{ name: null }, 422, 'parameter_invalid', 'name'],
        [{ name: '' }, 422, 'parameter_invalid', 'name'],
        [{ name: 'n'.repeat(201) }, 422, 'parameter_invalid', 'name'],
        [{ html: 5 }, 422, 'parameter_invalid', 'html'],
        [{ variables: null }, 422, 'parameter_invalid', 'variables'],
        [{ published_at: null }, 422, 'parameter_unknown', 'published_at'],
        [{ alias: 'tpl_x' }, 422, 'parameter_invalid', 'alias'],
        [{ alias: 'held' }, 409, 'alias_taken', 'alias'],
        [{ alias: 'held', name: 'Also renamed' }, 409, 'alias_taken', 'alias'],
      ];
      for (const [body, status, code, param] of cases) {
        const response = await api.request('PATCH', `/v1/templates/${target.id}`, { body });
        assert.equal(response.status, status, JSON.stringify(body).slice(0, 100));
        assert.equal(errorOf(response).code, code, JSON.stringify(body).slice(0, 100));
        assert.equal(errorOf(response).param, param, JSON.stringify(body).slice(0, 100));
      }
      assert.deepEqual(await draftRow(target.id), row);
      // Setting its own alias again is not a conflict.
      const same = await api.request('PATCH', '/v1/templates/target', { body: { alias: 'target' } });
      assert.equal(same.status, 200);
    });

    test('render escapes variables in html only, and renders a published version', async () => {
      const { id } = await createOk({
        name: 'Render',
        subject: 'Hello {{ name }}',
        html: '<p>Hello {{ name }}</p><p>{{ note | raw }}</p>',
        text: 'Hello {{ name }}{% for item in items %} {{ item }}{% endfor %}',
      });
      const response = await api.request('POST', `/v1/templates/${id}/render`, {
        body: { variables: { name: '<b>Ann</b> & co', note: '<i>trusted</i>', items: [1, 'two'] } },
      });
      assert.equal(response.status, 200);
      assert.deepEqual(response.body, {
        object: 'rendered_template',
        subject: 'Hello <b>Ann</b> & co',
        html: '<p>Hello &lt;b&gt;Ann&lt;/b&gt; &amp; co</p><p><i>trusted</i></p>',
        text: 'Hello <b>Ann</b> & co 1 two',
        warnings: [],
      });

      const noVariables = await api.request('POST', `/v1/templates/${id}/render`);
      assert.equal(noVariables.status, 200);
      assert.deepEqual(noVariables.body, {
        object: 'rendered_template',
        subject: 'Hello ',
        html: '<p>Hello </p><p></p>',
        text: 'Hello ',
        warnings: ['name', 'note'].map((variable) => ({
          code: 'missing_variable',
          variable,
          message: `No value for the variable '${variable}', which the template prints: it renders blank here, and a send without it is refused (422 template_variables_missing).`,
        })),
      });

      await api.request('POST', `/v1/templates/${id}/publish`, { body: { subject: 'v1 {{ name }}' } });
      await api.request('PATCH', `/v1/templates/${id}`, { body: { subject: 'draft {{ name }}' } });
      const draft = await api.request('POST', `/v1/templates/${id}/render`, {
        body: { variables: { name: 'Bo' } },
      });
      assert.equal(draft.body.subject, 'draft Bo');
      const published = await api.request('POST', `/v1/templates/${id}/render`, {
        body: { variables: { name: 'Bo' }, version: 1 },
      });
      assert.equal(published.status, 200);
      assert.equal(published.body.subject, 'v1 Bo');

      const missing = await api.request('POST', `/v1/templates/${id}/render`, { body: { version: 2 } });
      assert.equal(missing.status, 404);
      assert.deepEqual(errorOf(missing), {
        code: 'resource_missing',
        message: `Template '${id}' has no version 2.`,
        param: 'version',
      });
    });

    test('render generates text from html when the template has none', async () => {
      const { id } = await createOk({
        name: 'Html only',
        html: '<h1>Hi {{ name }}</h1><p>Your code is <b>{{ code }}</b>.</p><p><a href="https://example.com/x">Open</a></p>',
      });
      const response = await api.request('POST', `/v1/templates/${id}/render`, {
        body: { variables: { name: 'Ann', code: 1234 } },
      });
      assert.equal(response.status, 200);
      assert.deepEqual(response.body, {
        object: 'rendered_template',
        subject: null,
        html: '<h1>Hi Ann</h1><p>Your code is <b>1234</b>.</p><p><a href="https://example.com/x">Open</a></p>',
        text: 'HI ANN\n\nYour code is 1234.\n\nOpen [https://example.com/x]',
        warnings: [],
      });
    });

    test('render answers 200 with a warning for each missing variable a send would refuse', async () => {
      const { id } = await createOk({
        name: 'Warnings',
        subject: 'Order {{ order.id }}',
        html: '<p>Hi {{ first_name }}</p>{% if coupon %}<p>{{ coupon }}</p>{% endif %}<p>{{ nick | default: "friend" }}</p>',
        variables: ['first_name', 'coupon'],
      });
      const warning = (variable: string, declared: boolean) => ({
        code: 'missing_variable',
        variable,
        message: declared
          ? `No value for the declared variable '${variable}': it renders blank here, and a send without it is refused (422 template_variables_missing).`
          : `No value for the variable '${variable}', which the template prints: it renders blank here, and a send without it is refused (422 template_variables_missing).`,
      });

      // Declared ones first (coupon is declared, though only printed inside an if), then printed ones;
      // `nick` has a default, so it is not needed.
      const none = await api.request('POST', `/v1/templates/${id}/render`, { body: { variables: {} } });
      assert.equal(none.status, 200, JSON.stringify(none.body));
      assert.equal(none.body.subject, 'Order ');
      assert.equal(none.body.html, '<p>Hi </p><p>friend</p>');
      assert.deepEqual(none.body.warnings, [
        warning('first_name', true),
        warning('coupon', true),
        warning('order.id', false),
      ]);

      // null counts as given (as for a send); a nested path needs its leaf.
      const some = await api.request('POST', `/v1/templates/${id}/render`, {
        body: { variables: { first_name: 'Ada', coupon: null, order: {} } },
      });
      assert.equal(some.status, 200);
      assert.deepEqual(some.body.warnings, [warning('order.id', false)]);

      const all = await api.request('POST', `/v1/templates/${id}/render`, {
        body: { variables: { first_name: 'Ada', coupon: 'X1', order: { id: 7 } } },
      });
      assert.equal(all.status, 200);
      assert.deepEqual(all.body.warnings, []);
      assert.equal(all.body.subject, 'Order 7');

      // A send with what the preview warned about is refused, naming the same variables.
      assert.equal((await api.request('POST', `/v1/templates/${id}/publish`)).status, 200);
      const send = await api.request('POST', '/v1/emails', {
        body: { from: 'shop@example.com', to: 'ada@example.org', template: { id, variables: {} } },
      });
      assert.equal(send.status, 422, JSON.stringify(send.body));
      assert.equal(send.body.error.code, 'template_variables_missing');
      assert.equal(send.body.error.message, 'Missing template variables: first_name, coupon, order.id.');
      // A published version is previewed with its own declared variables.
      const version = await api.request('POST', `/v1/templates/${id}/render`, { body: { version: 1 } });
      assert.deepEqual(
        version.body.warnings.map((item: { variable: string }) => item.variable),
        ['first_name', 'coupon', 'order.id'],
      );
    });

    test('render refuses bad input, bad Liquid, runaway templates and empty templates', async () => {
      const { id } = await createOk({ name: 'Render errors', html: '<p>{{ name }}</p>' });
      const cases: [unknown, string, string][] = [
        [{ variables: 'name' }, 'parameter_invalid', 'variables'],
        [{ version: 0 }, 'parameter_invalid', 'version'],
        [{ version: '1' }, 'parameter_invalid', 'version'],
        [{ vars: {} }, 'parameter_unknown', 'vars'],
      ];
      for (const [body, code, param] of cases) {
        const response = await api.request('POST', `/v1/templates/${id}/render`, { body });
        assert.equal(response.status, 422, JSON.stringify(body));
        assert.equal(errorOf(response).code, code);
        assert.equal(errorOf(response).param, param);
      }

      await api.request('PATCH', `/v1/templates/${id}`, { body: { html: '<p>{{ name | nope }}</p>' } });
      const syntax = await api.request('POST', `/v1/templates/${id}/render`, { body: {} });
      assert.equal(syntax.status, 422);
      assert.equal(errorOf(syntax).code, 'template_syntax_error');
      assert.equal(errorOf(syntax).param, 'html');

      await api.request('PATCH', `/v1/templates/${id}`, {
        body: { html: '{% for i in (1..100000000) %}{{ i }}{% endfor %}' },
      });
      const runaway = await api.request('POST', `/v1/templates/${id}/render`, { body: {} });
      assert.equal(runaway.status, 422);
      const error = errorOf(runaway);
      assert.equal(error.code, 'template_render_error');
      assert.equal(error.param, 'html');
      assert.match(error.message, /^Rendering the html failed: .*limit exceeded/);

      await api.request('PATCH', `/v1/templates/${id}`, { body: { html: null } });
      const empty = await api.request('POST', `/v1/templates/${id}/render`, { body: {} });
      assert.equal(empty.status, 422);
      assert.equal(errorOf(empty).code, 'template_empty');
    });

    test('render does not reach prototypes', async () => {
      const { id } = await createOk({
        name: 'Prototype',
        text: '[{{ user.constructor }}][{{ user.__proto__ }}][{{ user.toString }}][{{ user.name }}]',
      });
      const response = await api.request('POST', `/v1/templates/${id}/render`, {
        body: { variables: { user: { name: 'Ann' } } },
      });
      assert.equal(response.status, 200);
      assert.equal(response.body.text, '[][][][Ann]');
    });

    test("another project's templates are invisible: 404 and an empty list", async () => {
      const mine = await createOk({ name: 'Mine', alias: 'mine-only', html: '<p>x</p>' });
      await api.request('POST', `/v1/templates/${mine.id}/publish`);
      const other = await api.createProject('Other project');
      const counts = await api.rowCounts();

      const list = await api.request('GET', '/v1/templates', { key: other.key });
      assert.equal(list.status, 200);
      assert.deepEqual(list.body, { object: 'list', data: [], has_more: false });

      for (const ref of [mine.id, 'mine-only']) {
        const attempts = [
          api.request('GET', `/v1/templates/${ref}`, { key: other.key }),
          api.request('PATCH', `/v1/templates/${ref}`, { key: other.key, body: { name: 'Stolen' } }),
          api.request('DELETE', `/v1/templates/${ref}`, { key: other.key }),
          api.request('POST', `/v1/templates/${ref}/publish`, { key: other.key, body: { html: 'x' } }),
          api.request('POST', `/v1/templates/${ref}/render`, { key: other.key, body: {} }),
          api.request('GET', `/v1/templates/${ref}/versions`, { key: other.key }),
          api.request('GET', `/v1/templates/${ref}/versions/1`, { key: other.key }),
        ];
        for (const response of await Promise.all(attempts)) {
          assert.equal(response.status, 404);
          assert.deepEqual(errorOf(response), {
            code: 'resource_missing',
            message: `No template with id '${ref}'.`,
            param: 'id',
          });
        }
      }
      assert.deepEqual(await api.rowCounts(), counts);
      assert.deepEqual((await api.request('GET', `/v1/templates/${mine.id}`)).body.name, 'Mine');

      // Aliases are unique per project, not across projects.
      const sameAlias = await create({ name: 'Theirs', alias: 'mine-only' }, other.key);
      assert.equal(sameAlias.status, 201);
      assert.equal((await api.request('GET', '/v1/templates/mine-only')).body.id, mine.id);
      assert.equal(
        (await api.request('GET', '/v1/templates/mine-only', { key: other.key })).body.name,
        'Theirs',
      );
    });

    test('concurrent publishes get distinct consecutive versions', async () => {
      const { id } = await createOk({ name: 'Race', text: 'x' });
      const results = await Promise.all(
        Array.from({ length: 5 }, (_, i) =>
          api.request('POST', `/v1/templates/${id}/publish`, { body: { text: `x${i}` } }),
        ),
      );
      for (const result of results) assert.equal(result.status, 200, JSON.stringify(result.body));
      assert.deepEqual(results.map((r) => r.body.version).sort(), [1, 2, 3, 4, 5]);
      const versions = (await api.request('GET', `/v1/templates/${id}/versions`)).body.data;
      assert.deepEqual(
        versions.map((v: any) => v.version),
        [5, 4, 3, 2, 1],
      );
      const template = (await api.request('GET', `/v1/templates/${id}`)).body;
      assert.equal(template.published_version, 5);
      assert.equal(template.text, versions[0].text);
      assert.equal(template.has_unpublished_changes, false);
    });

    test('the routes are in the OpenAPI document under Templates', async () => {
      const document = (await api.request('GET', '/v1/openapi.json', { key: null })).body;
      const operations = [
        ['/v1/templates', 'post'],
        ['/v1/templates', 'get'],
        ['/v1/templates/{id}', 'get'],
        ['/v1/templates/{id}', 'patch'],
        ['/v1/templates/{id}', 'delete'],
        ['/v1/templates/{id}/publish', 'post'],
        ['/v1/templates/{id}/versions', 'get'],
        ['/v1/templates/{id}/versions/{version}', 'get'],
        ['/v1/templates/{id}/render', 'post'],
      ] as const;
      for (const [path, method] of operations) {
        const operation = document.paths[path]?.[method];
        assert.ok(operation, `${method} ${path}`);
        assert.deepEqual(operation.tags, ['Templates']);
        assert.ok(operation.summary);
        assert.ok(operation.responses['422'], `${method} ${path} documents 422`);
      }
    });
  });
}
