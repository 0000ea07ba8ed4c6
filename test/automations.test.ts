import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { assertApiError, created as createdIn, idsOf } from './helpers/answers.ts';

// Automations under /v1: the graph saved and answered as sent (exact bodies), checked whole on every save (one
// trigger, every step reachable, no cycle without a wait, templates published, segments and topics the
// project's) with a 422 naming the step; update, duplicate, stop, delete; another project's ids are 404.

const TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const NO_RUNS = { running: 0, waiting: 0, completed: 0, cancelled: 0, failed: 0 };

for (const engine of ALL_ENGINES) {
  describe(`automations (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let welcome: string;
    let draft: string;
    let segment: string;
    before(async () => {
      api = await startTestApp(engine);
      welcome = (await created('/v1/templates', { name: 'Welcome', subject: 'Welcome!', html: '<p>Hi</p>' }))
        .id;
      assert.equal((await api.request('POST', `/v1/templates/${welcome}/publish`, { body: {} })).status, 200);
      draft = (await created('/v1/templates', { name: 'Draft', subject: 'Soon', html: '<p>Later</p>' })).id;
      segment = (await created('/v1/segments', { name: 'Onboarded' })).id;
    });
    after(() => api.close());

    function created(path: string, body: unknown) {
      return createdIn(api, path, body);
    }

    const series = () => ({
      name: 'Welcome series',
      steps: [
        { key: 'start', type: 'trigger', config: { event_name: 'user.signed_up' } },
        {
          key: 'welcome',
          type: 'send_email',
          config: { template: { id: welcome }, from: 'Acme <hi@acme.test>' },
        },
        { key: 'wait', type: 'delay', config: { duration: '2 days' } },
        {
          key: 'is_pro',
          type: 'condition',
          config: { type: 'rule', field: 'contact.properties.plan', operator: 'eq', value: 'pro' },
        },
        { key: 'tag', type: 'add_to_segment', config: { segment_id: segment } },
      ],
      connections: [
        { from: 'start', to: 'welcome' },
        { from: 'welcome', to: 'wait', type: 'default' },
        { from: 'wait', to: 'is_pro' },
        { from: 'is_pro', to: 'tag', type: 'condition_met' },
      ],
    });

    test('create, get, list, update, duplicate, stop, delete: exact bodies', async () => {
      const automation = await created('/v1/automations', series());
      assert.match(automation.id, /^aut_[0-9a-z]{26}$/);
      assert.match(automation.created_at, TIME);
      const body = series();
      assert.deepEqual(automation, {
        object: 'automation',
        id: automation.id,
        name: 'Welcome series',
        status: 'disabled',
        steps: body.steps,
        connections: body.connections.map((connection) => ({ type: 'default', ...connection })),
        runs: NO_RUNS,
        created_at: automation.created_at,
        updated_at: automation.created_at,
      });
      assert.deepEqual((await api.request('GET', `/v1/automations/${automation.id}`)).body, automation);

      const enabled = await api.request('PATCH', `/v1/automations/${automation.id}`, {
        body: { status: 'enabled', name: 'Welcome 🎉' },
      });
      assert.equal(enabled.status, 200, JSON.stringify(enabled.body));
      assert.deepEqual(enabled.body, {
        ...automation,
        status: 'enabled',
        name: 'Welcome 🎉',
        updated_at: enabled.body.updated_at,
      });

      const copy = await api.request('POST', `/v1/automations/${automation.id}/duplicate`);
      assert.equal(copy.status, 201);
      assert.deepEqual(copy.body, {
        ...enabled.body,
        id: copy.body.id,
        name: 'Welcome 🎉 (copy)',
        status: 'disabled',
        created_at: copy.body.created_at,
        updated_at: copy.body.created_at,
      });
      assert.deepEqual(idsOf(await api.request('GET', '/v1/automations')), [copy.body.id, automation.id]);
      assert.deepEqual(idsOf(await api.request('GET', '/v1/automations?status=enabled')), [automation.id]);

      const stopped = await api.request('POST', `/v1/automations/${automation.id}/stop`);
      assert.equal(stopped.status, 200);
      assert.equal(stopped.body.status, 'disabled');

      const removed = await api.request('DELETE', `/v1/automations/${copy.body.id}`);
      assert.deepEqual(removed.body, { object: 'automation', id: copy.body.id, deleted: true });
      assertApiError(
        await api.request('GET', `/v1/automations/${copy.body.id}`),
        404,
        'resource_missing',
        `No automation with id '${copy.body.id}'.`,
        'id',
      );
      assert.deepEqual((await api.request('GET', `/v1/automations/${automation.id}/runs`)).body, {
        object: 'list',
        data: [],
        has_more: false,
      });
    });

    /** The 422 a graph gets, nothing stored. */
    async function refused(body: unknown, message: string, param: string) {
      const before = await api.rowCounts();
      assertApiError(
        await api.request('POST', '/v1/automations', { body }),
        422,
        'invalid_automation',
        message,
        param,
      );
      assert.deepEqual(await api.rowCounts(), before);
    }

    test('the graph is checked on save, each refusal naming the step', async () => {
      const base = series();
      const withSteps = (steps: unknown[], connections: unknown[] = base.connections) => ({
        ...base,
        steps,
        connections,
      });
      await refused(
        withSteps(base.steps.slice(1), base.connections.slice(1)),
        'An automation has exactly one trigger step; this one has 0.',
        'steps',
      );
      await refused(
        withSteps([...base.steps, { key: 'again', type: 'trigger', config: { event_name: 'x' } }]),
        'An automation has exactly one trigger step; this one has 2.',
        'steps',
      );
      await refused(
        withSteps([...base.steps, { key: 'lonely', type: 'contact_delete', config: {} }]),
        "Step 'lonely' (contact_delete) cannot be reached from the trigger.",
        'steps[5]',
      );
      await refused(
        withSteps(base.steps, [...base.connections, { from: 'tag', to: 'nowhere' }]),
        "Connection 4 goes to 'nowhere', which is no step.",
        'connections[4].to',
      );
      await refused(
        withSteps(base.steps, [...base.connections, { from: 'tag', to: 'is_pro' }]),
        "Step 'is_pro' (condition) is on a cycle without a delay or a wait for an event; it would run without end.",
        'steps[3]',
      );
      // The same loop through the delay is allowed.
      const loop = await api.request('POST', '/v1/automations', {
        body: withSteps(base.steps, [...base.connections, { from: 'tag', to: 'wait' }]),
      });
      assert.equal(loop.status, 201, JSON.stringify(loop.body));
      await refused(
        withSteps(base.steps, [...base.connections, { from: 'welcome', to: 'tag' }]),
        "Step 'welcome' has two 'default' connections; a run takes one way.",
        'connections[4]',
      );
      await refused(
        withSteps(base.steps, [...base.connections.slice(0, 3), { from: 'is_pro', to: 'tag' }]),
        "Step 'is_pro' (condition) cannot be left by a 'default' connection (only 'condition_met', 'condition_not_met').",
        'connections[3].type',
      );
      await refused(
        withSteps(
          base.steps.map((step) =>
            step.key === 'welcome' ? { ...step, config: { ...step.config, template: { id: draft } } } : step,
          ),
        ),
        `Step 'welcome' (send_email): template '${draft}' is not published.`,
        'steps[1].config.template.id',
      );
      await refused(
        withSteps(
          base.steps.map((step) => (step.key === 'wait' ? { ...step, config: { duration: 'soon' } } : step)),
        ),
        "Step 'wait' (delay): config.duration 'soon' is not a duration such as '30 minutes', '2 days' or '1 week' (up to a year).",
        'steps[2].config.duration',
      );
      await refused(
        withSteps(
          base.steps.map((step) =>
            step.key === 'is_pro'
              ? { ...step, config: { type: 'rule', field: 'contact.plan', operator: 'gt', value: 'x' } }
              : step,
          ),
        ),
        "Step 'is_pro' (condition): operator 'gt' compares with a number.",
        'steps[3].config.value',
      );
      await refused(
        withSteps(
          base.steps.map((step) =>
            step.key === 'tag' ? { ...step, config: { segment_id: 'seg_nope' } } : step,
          ),
        ),
        "Step 'tag': no segment 'seg_nope'.",
        'steps[4].config.segment_id',
      );
      await refused(
        withSteps(
          base.steps.map((step) =>
            step.key === 'welcome' ? { ...step, config: { template: { id: welcome } } } : step,
          ),
        ),
        "Step 'welcome' (send_email): config.from must be a non-empty string.",
        'steps[1].config.from',
      );
      const waits = {
        ...base,
        steps: [
          base.steps[0],
          { key: 'hold', type: 'wait_for_event', config: { event_name: 'user.activated' } },
          { key: 'bye', type: 'contact_delete', config: {} },
        ],
        connections: [
          { from: 'start', to: 'hold' },
          { from: 'hold', to: 'bye', type: 'timeout' },
        ],
      };
      await refused(waits, "Step 'hold' (wait_for_event) has no timeout to leave by.", 'connections[1].type');
      // A step of an unknown type is refused by the schema.
      assert.equal(
        (
          await api.request('POST', '/v1/automations', {
            body: withSteps([...base.steps, { key: 'x', type: 'teleport', config: {} }]),
          })
        ).status,
        422,
      );
    });

    test('an update replaces the graph whole, checked again; another project sees nothing', async () => {
      const automation = await created('/v1/automations', series());
      assertApiError(
        await api.request('PATCH', `/v1/automations/${automation.id}`, { body: { steps: series().steps } }),
        422,
        'parameter_missing',
        'Send steps and connections together: the graph is replaced whole.',
        'connections',
      );
      const shorter = await api.request('PATCH', `/v1/automations/${automation.id}`, {
        body: { steps: series().steps.slice(0, 2), connections: series().connections.slice(0, 1) },
      });
      assert.equal(shorter.status, 200, JSON.stringify(shorter.body));
      assert.equal(shorter.body.steps.length, 2);

      const other = await api.createProject('Elsewhere');
      for (const [method, path] of [
        ['GET', `/v1/automations/${automation.id}`],
        ['PATCH', `/v1/automations/${automation.id}`],
        ['POST', `/v1/automations/${automation.id}/stop`],
        ['POST', `/v1/automations/${automation.id}/duplicate`],
        ['DELETE', `/v1/automations/${automation.id}`],
        ['GET', `/v1/automations/${automation.id}/runs`],
      ] as const) {
        const response = await api.request(method, path, {
          key: other.key,
          ...(method === 'PATCH' ? { body: { name: 'Mine' } } : {}),
        });
        assert.equal(response.status, 404, `${method} ${path}`);
      }
      // Their templates are not ours either.
      const theirs = await api.request('POST', '/v1/automations', { key: other.key, body: series() });
      assert.equal(theirs.status, 422);
      assert.equal(theirs.body.error.message, `Step 'welcome' (send_email): no template '${welcome}'.`);
    });
  });
}
