import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { SendingWorker } from '../src/modules/sending/sending.worker.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { assertApiError, created } from './helpers/answers.ts';
import { parseMail } from './helpers/engagement.ts';
import { startSendingWorker } from './helpers/sending.ts';
import { startSmtpServer, type TestSmtpServer } from './helpers/smtp.ts';

// A broadcast's preview as one of its contacts and its test to one address (issue 37, item 8): the preview is
// the copy the fan-out would make for the contact (personalized, preview text in, the per-contact links left
// as placeholders); the test arrives at a real SMTP server as an ordinary email marked as a test, never counted
// in the broadcast; bad input is a clear 4xx; tenants and keys are held apart as for sending.

const PUBLIC_URL = 'https://mail.acme.test';

for (const engine of ALL_ENGINES) {
  describe(`broadcast preview and test (${engine})`, { skip: engineSkip(engine) }, () => {
    let api: TestApp;
    let smtp: TestSmtpServer;
    let sending: SendingWorker;
    const seed = {} as { segment: string; ada: string; broadcast: string };

    before(async () => {
      api = await startTestApp(engine, { allowPrivateUrls: true, publicUrl: PUBLIC_URL });
      smtp = await startSmtpServer();
      sending = await startSendingWorker(api, { relayPort: smtp.port, publicUrl: PUBLIC_URL });
      await created(api, '/v1/contact-properties', { key: 'plan', type: 'string', fallback_value: 'free' });
      seed.segment = (await created(api, '/v1/segments', { name: 'Readers' })).id;
      seed.ada = (
        await created(api, '/v1/contacts', {
          email: 'ada@readers.test',
          first_name: 'Ada',
          properties: { plan: 'pro' },
        })
      ).id;
      await created(api, '/v1/contacts', { email: 'bob@readers.test' });
      seed.broadcast = (
        await created(api, '/v1/broadcasts', {
          name: 'November',
          from: 'Acme News <news@acme.test>',
          reply_to: 'help@acme.test',
          subject: 'Hello {{ contact.first_name | default: "friend" }}',
          preview_text: 'What shipped',
          html: '<html><body><p>Hi {{ contact.first_name | default: "there" }}, on {{ contact.properties.plan }}.</p><a href="{{ unsubscribe_url }}">Leave</a> <a href="{{ preferences_url }}">Choose</a></body></html>',
          text: 'Hi {{ contact.first_name | default: "there" }} ({{ contact.email }}). Leave: {{ unsubscribe_url }}',
          segment_id: seed.segment,
        })
      ).id;
    });
    after(async () => {
      await sending?.stop();
      await smtp?.close();
      await api?.close();
    });

    test("the preview is the contact's copy, by id or address; the per-contact links stay placeholders", async () => {
      const preview = await api.request('POST', `/v1/broadcasts/${seed.broadcast}/preview`, {
        body: { contact: seed.ada },
      });
      assert.equal(preview.status, 200, JSON.stringify(preview.body));
      assert.deepEqual(preview.body, {
        object: 'broadcast_preview',
        broadcast_id: seed.broadcast,
        contact_id: seed.ada,
        to: 'ada@readers.test',
        from: 'Acme News <news@acme.test>',
        reply_to: ['help@acme.test'],
        subject: 'Hello Ada',
        html:
          '<html><body><div style="display:none;max-height:0;overflow:hidden;mso-hide:all" aria-hidden="true">What shipped</div>' +
          '<p>Hi Ada, on pro.</p><a href="{{ unsubscribe_url }}">Leave</a> <a href="{{ preferences_url }}">Choose</a></body></html>',
        text: 'Hi Ada (ada@readers.test). Leave: {{ unsubscribe_url }}',
      });
      // By address (any case), and a contact without a name or a plan: the fallbacks.
      const bob = await api.request('POST', `/v1/broadcasts/${seed.broadcast}/preview`, {
        body: { contact: 'BOB@readers.test' },
      });
      assert.equal(bob.status, 200);
      assert.equal(bob.body.subject, 'Hello friend');
      assert.match(bob.body.html, /<p>Hi there, on free\.<\/p>/);
      // A preview stores nothing and sends nothing; a read_only key may look.
      const reader = (await created(api, '/v1/api-keys', { name: 'reader', permission: 'read_only' })).token;
      const read = await api.request('POST', `/v1/broadcasts/${seed.broadcast}/preview`, {
        key: reader,
        body: { contact: seed.ada },
      });
      assert.equal(read.status, 200);
      assert.equal(read.body.subject, 'Hello Ada');
    });

    test("a broadcast written in Resend's dialect (under /resend) previews in it, with the same placeholders", async () => {
      const made = await api.request('POST', '/resend/broadcasts', {
        body: {
          name: 'Launch',
          segment_id: seed.segment,
          from: 'Acme <news@acme.test>',
          subject: 'Hi {{{FIRST_NAME|there}}}',
          html: '<p>{{{FIRST_NAME|there}}} on {{{plan}}}</p><a href="{{{RESEND_UNSUBSCRIBE_URL}}}">Leave</a><a href="{{{PREFERENCES_URL}}}">Choose</a>',
        },
      });
      assert.equal(made.status, 200, JSON.stringify(made.body));
      const preview = await api.request('POST', `/v1/broadcasts/${made.body.id}/preview`, {
        body: { contact: 'ada@readers.test' },
      });
      assert.equal(preview.status, 200, JSON.stringify(preview.body));
      assert.equal(preview.body.subject, 'Hi Ada');
      assert.equal(
        preview.body.html,
        '<p>Ada on pro</p><a href="{{ unsubscribe_url }}">Leave</a><a href="{{ preferences_url }}">Choose</a>',
      );
    });

    test('a preview refused: an unknown contact, another project’s, a missing field, a broken Liquid', async () => {
      const path = `/v1/broadcasts/${seed.broadcast}/preview`;
      assertApiError(
        await api.request('POST', path, { body: { contact: 'con_00000000000000000000000000' } }),
        404,
        'resource_missing',
        "No contact 'con_00000000000000000000000000'.",
        'contact',
      );
      assertApiError(
        await api.request('POST', path, { body: { contact: 'nobody@readers.test' } }),
        404,
        'resource_missing',
        "No contact 'nobody@readers.test'.",
        'contact',
      );
      const other = await api.createProject('Other');
      const theirs = await created(api, '/v1/contacts', { email: 'zed@other.test' }, other.key);
      assertApiError(
        await api.request('POST', path, { body: { contact: theirs.id } }),
        404,
        'resource_missing',
        `No contact '${theirs.id}'.`,
        'contact',
      );
      // Their key, our broadcast: 404 too.
      const foreign = await api.request('POST', path, { key: other.key, body: { contact: theirs.id } });
      assert.equal(foreign.status, 404);
      assert.equal(foreign.body.error.message, `No broadcast with id '${seed.broadcast}'.`);
      const missing = await api.request('POST', path, { body: {} });
      assert.equal(missing.status, 422);
      assert.equal(missing.body.error.param, 'contact');
      const broken = await created(api, '/v1/broadcasts', {
        from: 'news@acme.test',
        subject: 'x',
        html: '<p>{% if %}</p>',
        segment_id: seed.segment,
      });
      const refused = await api.request('POST', `/v1/broadcasts/${broken.id}/preview`, {
        body: { contact: seed.ada },
      });
      assert.equal(refused.status, 422, JSON.stringify(refused.body));
      assert.equal(refused.body.error.param, 'html');
    });

    test('a test arrives once, marked, personalized as the contact, and is not counted in the broadcast', async () => {
      const answer = await api.request('POST', `/v1/broadcasts/${seed.broadcast}/test`, {
        body: { to: 'Me <me@team.test>', contact: seed.ada },
      });
      assert.equal(answer.status, 202, JSON.stringify(answer.body));
      assert.match(answer.body.email_id, /^msg_/);
      assert.deepEqual(answer.body, {
        object: 'broadcast_test',
        broadcast_id: seed.broadcast,
        email_id: answer.body.email_id,
        to: 'Me <me@team.test>',
        contact_id: seed.ada,
      });
      await smtp.waitFor(1, 30_000);
      const arrived = smtp.messages.filter((message) => message.to.includes('me@team.test'));
      assert.equal(arrived.length, 1);
      const mail = await parseMail(arrived[0]!.raw);
      assert.match(arrived[0]!.raw, /^Subject: \[Test\] Hello Ada\r$/m);
      assert.match(mail.html, /<p>Hi Ada, on pro\.<\/p>/);
      assert.match(mail.html, /display:none[^>]*>What shipped<\/div>/);
      // Its unsubscribe is the test address's own one-click link; the preference link a placeholder.
      assert.equal(mail.listUnsubscribePost, 'List-Unsubscribe=One-Click');
      assert.ok(mail.unsubscribeUrl?.startsWith(`${PUBLIC_URL}/u/`));
      assert.ok(mail.text.includes(mail.unsubscribeUrl!));
      assert.match(mail.html, /href="\{\{ preferences_url \}\}"/);
      // An ordinary email, tagged; the broadcast is still a draft with nothing counted.
      const email = await api.request('GET', `/v1/emails/${answer.body.email_id}`);
      assert.equal(email.body.broadcast_id, null);
      assert.deepEqual(email.body.tags, { broadcast_test: seed.broadcast });
      const broadcast = await api.request('GET', `/v1/broadcasts/${seed.broadcast}`);
      assert.equal(broadcast.body.status, 'draft');
      assert.deepEqual(Object.values(broadcast.body.counts), Array(11).fill(0));
      // Without a contact: the project's contact with the address, else a stand-in with the fallbacks.
      const asBob = await api.request('POST', `/v1/broadcasts/${seed.broadcast}/test`, {
        body: { to: 'bob@readers.test' },
      });
      assert.equal(asBob.status, 202);
      assert.match(asBob.body.contact_id, /^con_/);
      const standIn = await api.request('POST', `/v1/broadcasts/${seed.broadcast}/test`, {
        body: { to: 'new@team.test' },
      });
      assert.equal(standIn.status, 202);
      assert.equal(standIn.body.contact_id, null);
      await smtp.waitFor(3, 30_000);
      const fresh = smtp.messages.find((message) => message.to.includes('new@team.test'))!;
      assert.match(fresh.raw, /^Subject: \[Test\] Hello friend\r$/m);
    });

    test('a test refused: a bad address, an unknown or foreign contact, a key that may not send it', async () => {
      const path = `/v1/broadcasts/${seed.broadcast}/test`;
      const bad = await api.request('POST', path, { body: { to: 'not an address' } });
      assert.equal(bad.status, 422, JSON.stringify(bad.body));
      assert.equal(bad.body.error.code, 'invalid_address');
      assert.equal(bad.body.error.param, 'to');
      const many = await api.request('POST', path, { body: { to: ['a@team.test', 'b@team.test'] } });
      assert.equal(many.status, 422);
      assert.equal(many.body.error.param, 'to');
      assertApiError(
        await api.request('POST', path, { body: { to: 'me@team.test', contact: 'nobody@readers.test' } }),
        404,
        'resource_missing',
        "No contact 'nobody@readers.test'.",
        'contact',
      );
      const other = await api.createProject('Elsewhere');
      const theirs = await created(api, '/v1/contacts', { email: 'zed@other.test' }, other.key);
      const foreign = await api.request('POST', path, { body: { to: 'me@team.test', contact: theirs.id } });
      assert.equal(foreign.status, 404);
      assert.equal(foreign.body.error.param, 'contact');
      assert.equal(
        (await api.request('POST', path, { key: other.key, body: { to: 'me@team.test' } })).status,
        404,
      );
      // Keys: read_only may not send; a key limited to another domain is held to the From's.
      const key = async (body: Record<string, unknown>) => (await created(api, '/v1/api-keys', body)).token;
      const reader = await key({ name: 'reader', permission: 'read_only' });
      const readOnly = await api.request('POST', path, { key: reader, body: { to: 'me@team.test' } });
      assert.equal(readOnly.status, 403);
      const elsewhere = await created(api, '/v1/domains', { name: 'elsewhere.test' });
      const limited = await key({ name: 'limited', permission: 'sending_access', domain_id: elsewhere.id });
      const outside = await api.request('POST', path, { key: limited, body: { to: 'me@team.test' } });
      assert.equal(outside.status, 403, JSON.stringify(outside.body));
      assert.equal(outside.body.error.code, 'insufficient_permission');
      assert.equal(outside.body.error.param, 'from');
      const own = await created(api, '/v1/domains', { name: 'acme.test' });
      const sender = await key({ name: 'sender', permission: 'sending_access', domain_id: own.id });
      const allowed = await api.request('POST', path, { key: sender, body: { to: 'me@team.test' } });
      assert.equal(allowed.status, 202, JSON.stringify(allowed.body));
    });
  });
}
