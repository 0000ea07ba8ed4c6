import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { testClock } from './helpers/deliveries.ts';
import { until } from './helpers/until.ts';
import { startSendingWorker } from './helpers/sending.ts';

const EMAIL_ID = /^msg_[0-9a-z]{26}$/;
const TIMESTAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

const base = {
  from: 'Ada Lovelace <ada@example.com>',
  to: ['bob@example.org'],
  subject: 'Hello',
  text: 'Hi Bob',
};

for (const engine of ALL_ENGINES) {
  describe(`emails API (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    before(async () => {
      api = await startTestApp(engine);
    });
    after(() => api.close());

    const send = (body: unknown, options: { key?: string; headers?: Record<string, string> } = {}) =>
      api.request('POST', '/v1/emails', { body, ...options });
    const sendOk = async (body: unknown) => {
      const response = await send(body);
      assert.equal(response.status, 202, JSON.stringify(response.body));
      return response.body.id as string;
    };
    const publishTemplate = async (body: Record<string, unknown>) => {
      const created = await api.request('POST', '/v1/templates', { body });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const published = await api.request('POST', `/v1/templates/${created.body.id}/publish`, { body: {} });
      assert.equal(published.status, 200, JSON.stringify(published.body));
      return created.body.id as string;
    };

    test('accepts an email with 202, stored with its recipients before the answer', async () => {
      const response = await send({
        ...base,
        to: ['bob@example.org', 'Carol <carol@example.net>'],
        cc: 'dave@example.org',
        bcc: ['erin@example.org', 'BOB@example.org'],
        reply_to: 'support@example.com',
        html: '<p>Hi Bob</p>',
        headers: { 'List-Unsubscribe': '<mailto:unsub@example.com>', 'X-Entity-Ref-ID': 'abc-1' },
        tags: { category: 'welcome', user_id: 'u-42' },
      });
      assert.equal(response.status, 202);
      assert.deepEqual(Object.keys(response.body), ['id', 'object']);
      assert.match(response.body.id, EMAIL_ID);
      assert.equal(response.body.object, 'email');

      // Stored before the 202: the rows are there the moment the client has the id.
      const rows = await api.database.handle.db
        .selectFrom('email_recipients')
        .select(['address', 'type', 'status', 'host'])
        .where('email_id', '=', response.body.id)
        .orderBy('position')
        .execute();
      assert.deepEqual(
        rows.map((row) => ({ ...row })),
        [
          { address: 'bob@example.org', type: 'to', status: 'queued', host: 'example.org' },
          { address: 'carol@example.net', type: 'to', status: 'queued', host: 'example.net' },
          { address: 'dave@example.org', type: 'cc', status: 'queued', host: 'example.org' },
          // BOB@example.org is bob@example.org again: one copy per address.
          { address: 'erin@example.org', type: 'bcc', status: 'queued', host: 'example.org' },
        ],
      );

      const email = (await api.request('GET', `/v1/emails/${response.body.id}`)).body;
      assert.equal(email.object, 'email');
      assert.equal(email.id, response.body.id);
      assert.equal(email.from, 'Ada Lovelace <ada@example.com>');
      assert.deepEqual(email.to, ['bob@example.org', 'Carol <carol@example.net>']);
      assert.deepEqual(email.cc, ['dave@example.org']);
      assert.deepEqual(email.bcc, ['erin@example.org', 'BOB@example.org']);
      assert.deepEqual(email.reply_to, ['support@example.com']);
      assert.equal(email.subject, 'Hello');
      assert.equal(email.html, '<p>Hi Bob</p>');
      assert.equal(email.text, 'Hi Bob');
      assert.deepEqual(email.headers, {
        'List-Unsubscribe': '<mailto:unsub@example.com>',
        'X-Entity-Ref-ID': 'abc-1',
      });
      assert.deepEqual(email.tags, { category: 'welcome', user_id: 'u-42' });
      assert.equal(email.status, 'queued');
      assert.equal(email.message_id, `<${response.body.id}@example.com>`);
      assert.equal(email.template_id, null);
      assert.equal(email.scheduled_at, null);
      assert.match(email.created_at, TIMESTAMP);
      assert.equal(email.recipients.length, 4);
      assert.deepEqual(email.recipients[0], {
        address: 'bob@example.org',
        type: 'to',
        status: 'queued',
        attempts: 0,
        last_response: null,
        last_attempt_at: null,
        next_attempt_at: email.created_at,
        throttled: null,
        completed_at: null,
      });
      assert.deepEqual(email.events, []);
    });

    test('generates the text body from html when only html is sent', async () => {
      const id = await sendOk({
        ...base,
        text: undefined,
        html: '<h1>Welcome</h1><p>Glad you are <b>here</b>.</p>',
      });
      const email = (await api.request('GET', `/v1/emails/${id}`)).body;
      assert.match(email.text, /WELCOME/);
      assert.match(email.text, /Glad you are here\./);
    });

    test('renders the latest published template version, escaping html but not text or subject', async () => {
      const templateId = await publishTemplate({
        name: 'Welcome',
        alias: 'welcome-email',
        subject: 'Welcome, {{ name }} & co',
        html: '<p>Hello {{ name }}</p>',
        text: 'Hello {{ name }}, your plan is {{ account.plan }}',
        variables: ['name', 'account.plan'],
      });
      const id = await sendOk({
        from: base.from,
        to: base.to,
        template: { id: 'welcome-email', variables: { name: 'Tom & <Jerry>', account: { plan: 'pro' } } },
      });
      const email = (await api.request('GET', `/v1/emails/${id}`)).body;
      assert.equal(email.subject, 'Welcome, Tom & <Jerry> & co');
      assert.equal(email.html, '<p>Hello Tom &amp; &lt;Jerry&gt;</p>');
      assert.equal(email.text, 'Hello Tom & <Jerry>, your plan is pro');
      assert.equal(email.template_id, templateId);
      assert.equal(email.template_version, 1);

      // A second version; a send can still pin the first.
      const republished = await api.request('POST', `/v1/templates/${templateId}/publish`, {
        body: { subject: 'V2 for {{ name }}' },
      });
      assert.equal(republished.body.version, 2);
      const latest = await sendOk({
        from: base.from,
        to: base.to,
        template: { id: templateId, variables: { name: 'Ann', account: { plan: 'free' } } },
      });
      const pinned = await sendOk({
        from: base.from,
        to: base.to,
        template: { id: templateId, version: 1, variables: { name: 'Ann', account: { plan: 'free' } } },
      });
      const latestEmail = (await api.request('GET', `/v1/emails/${latest}`)).body;
      const pinnedEmail = (await api.request('GET', `/v1/emails/${pinned}`)).body;
      assert.equal(latestEmail.subject, 'V2 for Ann');
      assert.equal(latestEmail.template_version, 2);
      assert.equal(pinnedEmail.subject, 'Welcome, Ann & co');
      assert.equal(pinnedEmail.template_version, 1);
    });

    test('knows the variables a template prints from the template itself, declared or not', async () => {
      const templateId = await publishTemplate({
        name: 'Undeclared',
        subject: 'Hello {{ first_name }}',
        html: '<p>Order {{ order.id }} for {{ nick | default: "you" }}{% if coupon %} ({{ coupon.code }}){% endif %}</p>{% assign sign = "Acme" %}{{ sign }}',
      });
      const before = await api.rowCounts();
      const missing = await send({
        from: base.from,
        to: base.to,
        template: { id: templateId, variables: { order: {} } },
      });
      assert.equal(missing.status, 422);
      assert.deepEqual(missing.body, {
        error: {
          code: 'template_variables_missing',
          message: 'Missing template variables: first_name, order.id.',
          param: 'template.variables',
          request_id: missing.headers.get('x-request-id'),
        },
      });
      assert.deepEqual(await api.rowCounts(), before, 'nothing stored');

      // Ones with a default, inside a block, or assigned by the template itself are optional.
      const id = await sendOk({
        from: base.from,
        to: base.to,
        template: { id: templateId, variables: { first_name: 'Ada', order: { id: 7 } } },
      });
      const email = (await api.request('GET', `/v1/emails/${id}`)).body;
      assert.equal(email.subject, 'Hello Ada');
      assert.equal(email.html, '<p>Order 7 for you</p>Acme');
    });

    test("renders a declared variable's default when a send does not give it, and the value when it does", async () => {
      const templateId = await publishTemplate({
        name: 'Defaults',
        subject: 'Hello {{ name }}',
        text: '{{ name }} has {{ seats }} seats on {{ account.plan }}',
        variables: ['name', 'seats', 'account.plan'],
        variable_defaults: { name: 'friend', seats: 1, 'account.plan': 'free' },
      });
      const omitted = await sendOk({ from: base.from, to: base.to, template: { id: templateId } });
      const defaulted = (await api.request('GET', `/v1/emails/${omitted}`)).body;
      assert.equal(defaulted.subject, 'Hello friend');
      assert.equal(defaulted.text, 'friend has 1 seats on free');

      // A value given wins, null included; a default fills a path the given object lacks.
      const given = await sendOk({
        from: base.from,
        to: base.to,
        template: { id: templateId, variables: { name: 'Ada', seats: null, account: { id: 7 } } },
      });
      const rendered = (await api.request('GET', `/v1/emails/${given}`)).body;
      assert.equal(rendered.subject, 'Hello Ada');
      assert.equal(rendered.text, 'Ada has  seats on free');
    });

    test('refuses template sends that cannot render, naming what is wrong', async () => {
      const templateId = await publishTemplate({
        name: 'Receipt',
        subject: 'Receipt {{ order.id }}',
        text: 'Total {{ order.total }} for {{ name }}',
        variables: ['order.id', 'order.total', 'name'],
      });
      const before = await api.rowCounts();
      const missing = await send({
        from: base.from,
        to: base.to,
        template: { id: templateId, variables: { order: { id: 7 } } },
      });
      assert.equal(missing.status, 422);
      assert.equal(missing.body.error.code, 'template_variables_missing');
      assert.equal(missing.body.error.param, 'template.variables');
      assert.match(missing.body.error.message, /order\.total, name/);

      const unknown = await send({ from: base.from, to: base.to, template: { id: 'no-such-template' } });
      assert.equal(unknown.status, 404);
      assert.equal(unknown.body.error.param, 'template.id');

      const noVersion = await send({
        from: base.from,
        to: base.to,
        template: { id: templateId, version: 9, variables: { order: { id: 1, total: 2 }, name: 'x' } },
      });
      assert.equal(noVersion.status, 404);
      assert.equal(noVersion.body.error.param, 'template.version');

      const draft = await api.request('POST', '/v1/templates', {
        body: { name: 'Draft', subject: 's', text: 't' },
      });
      const unpublished = await send({ from: base.from, to: base.to, template: { id: draft.body.id } });
      assert.equal(unpublished.status, 422);
      assert.equal(unpublished.body.error.code, 'template_not_published');

      const both = await send({ ...base, template: { id: templateId } });
      assert.equal(both.status, 422);
      assert.equal(both.body.error.param, 'subject');

      const other = await api.createProject('Other');
      const foreign = await send(
        { from: base.from, to: base.to, template: { id: templateId, variables: {} } },
        { key: other.key },
      );
      assert.equal(foreign.status, 404);
      const after = await api.rowCounts();
      assert.deepEqual(
        { ...after, projects: 0, api_keys: 0, templates: 0, template_versions: 0 },
        {
          ...before,
          projects: 0,
          api_keys: 0,
          templates: 0,
          template_versions: 0,
        },
      );
    });

    // Each case: the body, the param the 422 must name, and its code.
    const badInput: Array<[string, Record<string, unknown>, string, string]> = [
      ['no from', { ...base, from: undefined }, 'from', 'parameter_missing'],
      ['from not an address', { ...base, from: 'ada at example.com' }, 'from', 'invalid_address'],
      ['from without a domain dot', { ...base, from: 'ada@localhost' }, 'from', 'invalid_address'],
      [
        'from with a line break',
        { ...base, from: 'Ada\r\nBcc: x@evil.com <ada@example.com>' },
        'from',
        'invalid_address',
      ],
      ['no to', { ...base, to: undefined }, 'to', 'parameter_missing'],
      ['empty to', { ...base, to: [] }, 'to', 'parameter_invalid'],
      [
        '51 to',
        { ...base, to: Array.from({ length: 51 }, (_, i) => `u${i}@example.org`) },
        'to',
        'parameter_invalid',
      ],
      [
        'a bad to among good',
        { ...base, to: ['ok@example.org', 'not-an-address'] },
        'to[1]',
        'invalid_address',
      ],
      ['to as a bad string', { ...base, to: 'bob@' }, 'to', 'invalid_address'],
      ['to with an IP domain', { ...base, to: ['bob@[127.0.0.1]'] }, 'to[0]', 'invalid_address'],
      ['to as a number', { ...base, to: [5] }, 'to[0]', 'parameter_invalid'],
      ['bad cc', { ...base, cc: ['x@@example.org'] }, 'cc[0]', 'invalid_address'],
      ['bad bcc', { ...base, bcc: 'a b@example.org' }, 'bcc', 'invalid_address'],
      ['bad reply_to', { ...base, reply_to: ['Name <nope>'] }, 'reply_to[0]', 'invalid_address'],
      ['no subject', { ...base, subject: undefined }, 'subject', 'parameter_missing'],
      ['empty subject', { ...base, subject: '' }, 'subject', 'parameter_invalid'],
      [
        'subject with a line break',
        { ...base, subject: 'Hi\r\nBcc: x@evil.com' },
        'subject',
        'parameter_invalid',
      ],
      ['subject too long', { ...base, subject: 'x'.repeat(999) }, 'subject', 'parameter_invalid'],
      ['no body', { ...base, text: undefined }, 'html', 'parameter_missing'],
      ['html not a string', { ...base, html: 5 }, 'html', 'parameter_invalid'],
      ['reserved header', { ...base, headers: { Subject: 'x' } }, 'headers.Subject', 'header_reserved'],
      [
        'reserved header, any case',
        { ...base, headers: { 'content-TYPE': 'text/plain' } },
        'headers.content-TYPE',
        'header_reserved',
      ],
      [
        'DKIM header',
        { ...base, headers: { 'DKIM-Signature': 'v=1' } },
        'headers.DKIM-Signature',
        'header_reserved',
      ],
      [
        'header injection',
        { ...base, headers: { 'X-Ok': 'a\r\nBcc: x@evil.com' } },
        'headers.X-Ok',
        'parameter_invalid',
      ],
      ['bad header name', { ...base, headers: { 'Bad Name': 'x' } }, 'headers.Bad Name', 'parameter_invalid'],
      ['header value not a string', { ...base, headers: { 'X-N': 1 } }, 'headers.X-N', 'parameter_invalid'],
      ['bad tag name', { ...base, tags: { 'bad tag': 'x' } }, 'tags.bad tag', 'parameter_invalid'],
      ['bad tag value', { ...base, tags: { ok: 'no spaces' } }, 'tags.ok', 'parameter_invalid'],
      ['scheduled_at not a time', { ...base, scheduled_at: 'tomorrow' }, 'scheduled_at', 'parameter_invalid'],
      [
        'scheduled_at too far',
        { ...base, scheduled_at: new Date(Date.now() + 40 * 86_400_000).toISOString() },
        'scheduled_at',
        'parameter_invalid',
      ],
      ['unknown field', { ...base, attachment: [] }, 'attachment', 'parameter_unknown'],
      [
        'template without id',
        { from: base.from, to: base.to, template: {} },
        'template.id',
        'parameter_missing',
      ],
      [
        'template with a bad version',
        { from: base.from, to: base.to, template: { id: 'x', version: 0 } },
        'template.version',
        'parameter_invalid',
      ],
    ];

    for (const [name, body, param, code] of badInput) {
      test(`refuses bad input with a 422 and stores nothing: ${name}`, async () => {
        const before = await api.rowCounts();
        const response = await send(JSON.parse(JSON.stringify(body)));
        assert.equal(response.status, 422, JSON.stringify(response.body));
        assert.equal(response.body.error.param, param, JSON.stringify(response.body));
        assert.equal(response.body.error.code, code, JSON.stringify(response.body));
        assert.ok(response.body.error.message.length > 10);
        assert.deepEqual(await api.rowCounts(), before);
      });
    }

    test('an address string over 320 characters is refused as too long, not as "not an array"', async () => {
      const response = await send({ ...base, to: `${'a'.repeat(320)}@example.org` });
      assert.equal(response.status, 422);
      assert.deepEqual(response.body.error, {
        code: 'parameter_invalid',
        message: "The field 'to' must be at most 320 characters long.",
        param: 'to',
        request_id: response.headers.get('x-request-id'),
      });
    });

    test('accepts the address forms a client sends', async () => {
      const id = await sendOk({
        ...base,
        from: '"Doe, Jane" <jane@example.com>',
        to: ['<plain@example.org>', 'Zoë <zoe@bücher.example>', "o'reilly+tag@sub.example.co.uk"],
      });
      const email = (await api.request('GET', `/v1/emails/${id}`)).body;
      assert.equal(email.from, '"Doe, Jane" <jane@example.com>');
      assert.deepEqual(email.to, [
        'plain@example.org',
        '"Zoë" <zoe@xn--bcher-kva.example>',
        "o'reilly+tag@sub.example.co.uk",
      ]);
      assert.deepEqual(
        email.recipients.map((recipient: any) => recipient.address),
        ['plain@example.org', 'zoe@xn--bcher-kva.example', "o'reilly+tag@sub.example.co.uk"],
      );
    });

    test('sends a batch in one go, or refuses it whole naming the email at fault', async () => {
      const response = await api.request('POST', '/v1/emails/batch', {
        body: [base, { ...base, to: 'carol@example.net' }, { ...base, subject: 'Third' }],
      });
      assert.equal(response.status, 202, JSON.stringify(response.body));
      assert.equal(response.body.object, 'list');
      assert.equal(response.body.has_more, false);
      assert.equal(response.body.data.length, 3);
      for (const item of response.body.data) {
        assert.match(item.id, EMAIL_ID);
        assert.equal(item.object, 'email');
      }
      const third = (await api.request('GET', `/v1/emails/${response.body.data[2].id}`)).body;
      assert.equal(third.subject, 'Third');

      const before = await api.rowCounts();
      const bad = await api.request('POST', '/v1/emails/batch', {
        body: [base, { ...base, to: ['ok@example.org', 'broken'] }],
      });
      assert.equal(bad.status, 422);
      assert.equal(bad.body.error.param, '[1].to[1]');
      const badSchema = await api.request('POST', '/v1/emails/batch', {
        body: [base, { ...base, subject: 7 }],
      });
      assert.equal(badSchema.status, 422);
      assert.equal(badSchema.body.error.param, '[1].subject');
      const empty = await api.request('POST', '/v1/emails/batch', { body: [] });
      assert.equal(empty.status, 422);
      const tooMany = await api.request('POST', '/v1/emails/batch', {
        body: Array.from({ length: 101 }, () => base),
      });
      assert.equal(tooMany.status, 422);
      assert.deepEqual(await api.rowCounts(), before);
    });

    test('lists emails newest first with cursors; another project sees none of them', async () => {
      const other = await api.createProject('Lister');
      const ids: string[] = [];
      for (let i = 0; i < 3; i += 1) {
        const response = await send({ ...base, subject: `List ${i}` }, { key: other.key });
        ids.push(response.body.id);
      }
      const page = await api.request('GET', '/v1/emails?limit=2', { key: other.key });
      assert.equal(page.status, 200);
      assert.equal(page.body.object, 'list');
      assert.deepEqual(
        page.body.data.map((email: any) => email.id),
        [ids[2], ids[1]],
      );
      assert.equal(page.body.has_more, true);
      assert.equal(page.body.data[0].subject, 'List 2');
      assert.equal(page.body.data[0].status, 'queued');
      assert.equal('html' in page.body.data[0], false);
      const next = await api.request('GET', `/v1/emails?limit=2&after=${ids[1]}`, { key: other.key });
      assert.deepEqual(
        next.body.data.map((email: any) => email.id),
        [ids[0]],
      );
      assert.equal(next.body.has_more, false);

      const foreign = await api.request('GET', `/v1/emails/${ids[0]}`);
      assert.equal(foreign.status, 404);
      assert.equal(foreign.body.error.code, 'resource_missing');
      const mine = await api.request('GET', '/v1/emails?limit=100');
      assert.ok(!mine.body.data.some((email: any) => ids.includes(email.id)));
      assert.equal((await api.request('GET', '/v1/emails/msg_nope')).status, 404);
    });

    test("an email's recipients and events are read only within its project", async () => {
      const other = await api.createProject('Scoped');
      const response = await send(base, { key: other.key });
      const emailId = response.body.id as string;
      await api.events.emit(other.projectId, 'email.sent', { email_id: emailId }, { emailId });
      const repo = api.services.repositories.emails;
      assert.equal((await repo.recipients(other.projectId, emailId)).length, 1);
      assert.equal((await api.events.forEmail(other.projectId, emailId)).length, 1);
      assert.deepEqual(await repo.recipients(api.projectId, emailId), []);
      assert.deepEqual(await api.events.forEmail(api.projectId, emailId), []);
    });

    test('schedules an email and cancels it before its time', async () => {
      const at = new Date(Date.now() + 3_600_000).toISOString();
      const id = await sendOk({ ...base, scheduled_at: at });
      const scheduled = (await api.request('GET', `/v1/emails/${id}`)).body;
      assert.equal(scheduled.status, 'scheduled');
      assert.equal(scheduled.scheduled_at, at);
      assert.equal(scheduled.recipients[0].next_attempt_at, at);

      const cancelled = await api.request('POST', `/v1/emails/${id}/cancel`);
      assert.equal(cancelled.status, 200, JSON.stringify(cancelled.body));
      assert.equal(cancelled.body.status, 'cancelled');
      assert.equal(cancelled.body.recipients[0].status, 'cancelled');

      const again = await api.request('POST', `/v1/emails/${id}/cancel`);
      assert.equal(again.status, 409);
      assert.equal(again.body.error.code, 'email_not_cancellable');

      const now = await sendOk(base);
      const notScheduled = await api.request('POST', `/v1/emails/${now}/cancel`);
      assert.equal(notScheduled.status, 409);
      // A time already past means now.
      const past = await sendOk({ ...base, scheduled_at: '2020-01-01T00:00:00Z' });
      assert.equal((await api.request('GET', `/v1/emails/${past}`)).body.scheduled_at, null);
    });

    test('has no raw message until the capture transport has processed the email', async () => {
      const id = await sendOk(base);
      const raw = await api.request('GET', `/v1/emails/${id}/raw`);
      assert.equal(raw.status, 404);
      assert.equal(raw.body.error.code, 'raw_not_available');
    });

    test('an Idempotency-Key makes a retried send one email', async () => {
      const headers = { 'idempotency-key': 'send-once-1' };
      const first = await send(base, { headers });
      const before = await api.rowCounts();
      const second = await send(base, { headers });
      assert.equal(first.status, 202);
      assert.equal(second.status, 202);
      assert.equal(second.headers.get('idempotent-replayed'), 'true');
      assert.equal(second.body.id, first.body.id);
      assert.deepEqual(await api.rowCounts(), before);
    });
  });

  describe(`emails daily limit (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    before(async () => {
      api = await startTestApp(engine, { sendDailyLimit: 3 });
    });
    after(() => api.close());

    test('counts recipients per project per day and answers 429 daily_send_limit beyond it', async () => {
      const ok = await api.request('POST', '/v1/emails', {
        body: { ...base, to: ['a@example.org', 'b@example.org'] },
      });
      assert.equal(ok.status, 202);
      const before = await api.rowCounts();
      const over = await api.request('POST', '/v1/emails', {
        body: { ...base, to: ['c@example.org', 'd@example.org'] },
      });
      assert.equal(over.status, 429);
      assert.equal(over.body.error.code, 'daily_send_limit');
      const retryAfter = Number(over.headers.get('retry-after'));
      assert.ok(retryAfter >= 1 && retryAfter <= 86_400, String(retryAfter));
      assert.deepEqual(await api.rowCounts(), before);
      // The one left fits; another project has its own allowance.
      assert.equal((await api.request('POST', '/v1/emails', { body: base })).status, 202);
      assert.equal((await api.request('POST', '/v1/emails', { body: base })).status, 429);
      const other = await api.createProject('Second');
      const batch = await api.request('POST', '/v1/emails/batch', {
        body: [base, base, base],
        key: other.key,
      });
      assert.equal(batch.status, 202);
    });
  });
}

for (const engine of ALL_ENGINES) {
  describe(`rescheduling (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let worker: SendingWorker;
    // Stands still until the test moves it: nothing scheduled comes due by itself.
    const clock = testClock({ frozen: true });
    before(async () => {
      api = await startTestApp(engine, { clock });
      worker = await startSendingWorker(api, { clock });
    });
    after(async () => {
      await worker.stop();
      await api.close();
    });

    const sendOk = async (body: unknown) => {
      const response = await api.request('POST', '/v1/emails', { body });
      assert.equal(response.status, 202, JSON.stringify(response.body));
      return response.body.id as string;
    };
    const reschedule = (id: string, body: unknown) => api.request('PATCH', `/v1/emails/${id}`, { body });
    const inHours = (hours: number) => new Date(clock.now().getTime() + hours * 3_600_000).toISOString();

    test('moves a scheduled email, which is sent at its new time', async () => {
      const id = await sendOk({ ...base, scheduled_at: inHours(2) });
      const at = inHours(1);
      const moved = await reschedule(id, { scheduled_at: at });
      assert.equal(moved.status, 200, JSON.stringify(moved.body));
      assert.equal(moved.body.status, 'scheduled');
      assert.equal(moved.body.scheduled_at, at);
      assert.equal(moved.body.recipients[0].next_attempt_at, at);
      // What the answer said is what is stored.
      assert.deepEqual((await api.request('GET', `/v1/emails/${id}`)).body, moved.body);

      // An hour on, the old time (two hours) has not come, the new one has: it is sent.
      clock.advance(3_600_000);
      const sent = await until(async () => {
        const email = (await api.request('GET', `/v1/emails/${id}`)).body;
        return email.status === 'delivered' && email;
      });
      assert.ok(Date.parse(sent.recipients[0].last_attempt_at) >= Date.parse(at));
      assert.deepEqual(
        sent.events.map((event: any) => event.type),
        ['email.sent', 'email.delivered'],
      );

      // Sent: too late to move (or to cancel).
      const late = await reschedule(id, { scheduled_at: inHours(1) });
      assert.equal(late.status, 409);
      assert.equal(late.body.error.code, 'email_not_reschedulable');
      assert.equal(
        late.body.error.message,
        `Email '${id}' is delivered; only a scheduled email whose time has not come can be rescheduled.`,
      );
    });

    test('refuses an email that is not scheduled, a time that has come or is too far, and an unknown email', async () => {
      const now = await sendOk(base);
      const notScheduled = await reschedule(now, { scheduled_at: inHours(1) });
      assert.equal(notScheduled.status, 409);
      assert.equal(notScheduled.body.error.code, 'email_not_reschedulable');
      assert.equal(notScheduled.body.error.param, 'id');

      const id = await sendOk({ ...base, scheduled_at: inHours(1) });
      const before = await api.rowCounts();
      const past = await reschedule(id, { scheduled_at: inHours(-1) });
      assert.equal(past.status, 422);
      assert.deepEqual(
        { code: past.body.error.code, param: past.body.error.param, message: past.body.error.message },
        {
          code: 'parameter_invalid',
          param: 'scheduled_at',
          message: 'scheduled_at must be in the future to reschedule an email.',
        },
      );
      const far = await reschedule(id, { scheduled_at: inHours(31 * 24) });
      assert.equal(far.status, 422);
      assert.equal(far.body.error.message, 'scheduled_at can be at most 30 days ahead.');
      const notATime = await reschedule(id, { scheduled_at: 'tomorrow' });
      assert.equal(notATime.status, 422);
      assert.equal(notATime.body.error.param, 'scheduled_at');
      const extra = await reschedule(id, { scheduled_at: inHours(2), subject: 'x' });
      assert.equal(extra.status, 422);
      assert.deepEqual(await api.rowCounts(), before);
      assert.equal((await api.request('GET', `/v1/emails/${id}`)).body.scheduled_at, inHours(1));

      const cancelled = await api.request('POST', `/v1/emails/${id}/cancel`);
      assert.equal(cancelled.status, 200);
      assert.equal((await reschedule(id, { scheduled_at: inHours(2) })).status, 409);

      const missing = await reschedule('msg_00000000000000000000000000', { scheduled_at: inHours(1) });
      assert.equal(missing.status, 404);
      assert.equal(missing.body.error.code, 'resource_missing');
    });
  });
}
