import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import nodemailer from 'nodemailer';
import { Resend } from 'resend';
import { startSubmission } from '../src/boot/listeners.ts';
import { DEFAULTS } from '../src/config.ts';
import { createSmtpBodyMemory } from '../src/lib/smtp-data.ts';
import { silentWorkerLogger } from '../src/lib/worker-logger.ts';
import type { SubmissionListener } from '../src/modules/submission/submission.listener.ts';
import { ALL_ENGINES, engineSkip, startTestApp, type TestApp } from './helpers/app.ts';
import { testClock } from './helpers/deliveries.ts';
import { emitOutcomes } from './helpers/outcomes.ts';
import { type Receiver, startReceiver } from './helpers/receiver.ts';

// The reputation breaker (issue 38 item 4): per project and per From domain, hard-bounce and complaint
// rates over a window of days, judged from the daily counts the events keep. Outcomes are emitted through
// the app's event service, as the sending and inbound workers emit them; the check is run as the workers
// run it, on the injected clock. What is asserted is what a sender sees: the API, the 403 on a send (API,
// batch, /resend through the resend SDK, SMTP submission), and the events delivered to a webhook.

const DAY_MS = 86_400_000;
const SETTINGS = {
  ...DEFAULTS.reputation,
  minBounceVolume: 20,
  minComplaintVolume: 100,
  // Checked by the test, not by a timer.
  checkIntervalMs: 3_600_000,
};

for (const engine of ALL_ENGINES) {
  describe(`reputation breaker (${engine})`, { skip: engineSkip(engine) }, () => {
    let t: TestApp;
    let receiver: Receiver;
    let submission: SubmissionListener;
    const clock = testClock({ frozen: true });

    before(async () => {
      receiver = await startReceiver();
      t = await startTestApp(engine, {
        clock,
        worker: true,
        allowPrivateUrls: true,
        // Broadcasts need one: every copy carries its own unsubscribe link.
        publicUrl: 'https://mail.example.test',
        config: {
          reputation: SETTINGS,
          submission: {
            ...DEFAULTS.submission,
            host: '127.0.0.1',
            port: 0,
            allowPlainLoopback: true,
          },
        },
      });
      submission = (await startSubmission(
        t.services,
        silentWorkerLogger,
        createSmtpBodyMemory(16 * 1024 * 1024),
      ))!;
      const hook = await t.request('POST', '/v1/webhooks', {
        body: {
          url: receiver.url,
          events: ['project.warning', 'project.sending_paused', 'project.sending_resumed'],
        },
      });
      assert.equal(hook.status, 201, JSON.stringify(hook.body));
    });
    after(async () => {
      await submission?.close();
      await t?.close();
      await receiver?.close();
    });

    /** Outcomes as the workers emit them: `n` events of `kind` for mail from `from`, in `projectId`. */
    const outcomes = (
      projectId: string,
      from: string,
      kind: 'email.sent' | 'email.bounced' | 'email.complained',
      n: number,
    ) => emitOutcomes(t, projectId, from, kind, n);

    const send = (key: string | undefined, from: string) =>
      t.request('POST', '/v1/emails', {
        ...(key ? { key } : {}),
        body: { from: `News <news@${from}>`, to: 'ada@example.org', subject: 'Hi', text: 'Hello' },
      });

    const reputation = async (key?: string) => {
      const response = await t.request('GET', '/v1/reputation', key ? { key } : {});
      assert.equal(response.status, 200, JSON.stringify(response.body));
      return response.body;
    };

    test('three hard bounces of three emails trip nothing: below the minimum volume', async () => {
      await outcomes(t.projectId, 'news.example', 'email.bounced', 3);
      assert.equal(await t.services.reputation.evaluate(), 0);
      const view = await reputation();
      assert.equal(view.project.state, 'ok');
      assert.equal(view.project.bounced_hard, 3);
      assert.equal(view.project.hard_bounce_rate, null, 'not judged below 20 messages');
      assert.equal(view.sending_paused, false);
      assert.equal((await send(undefined, 'news.example')).status, 202);
    });

    test('past the warning threshold: project.warning, delivered, and shown', async () => {
      // 3 hard bounces of 3 + 97 sent = 100 attempted: 3 %, past the 2 % warning, under the 5 % limit.
      await outcomes(t.projectId, 'news.example', 'email.sent', 97);
      assert.equal(await t.services.reputation.evaluate(), 2, 'the project and news.example');
      const view = await reputation();
      assert.equal(view.project.state, 'warning');
      assert.equal(view.project.reason, 'hard_bounce_rate');
      assert.equal(view.project.hard_bounce_rate, 0.03);
      assert.equal(view.project.holds, 'nothing');
      assert.deepEqual(
        view.domains.map((scope: any) => [scope.domain, scope.state, scope.sent, scope.bounced_hard]),
        [['news.example', 'warning', 97, 3]],
      );
      const requests = await receiver.waitFor(2);
      const bodies = requests.map((request) => JSON.parse(request.body));
      assert.deepEqual(
        bodies
          .map((body) => [body.type, body.data.domain])
          .sort((a, b) => String(a[1]).localeCompare(String(b[1]))),
        [
          ['project.warning', 'news.example'],
          ['project.warning', null],
        ],
      );
      const projectWide = bodies.find((body) => body.data.domain === null);
      assert.deepEqual(
        {
          state: projectWide.data.state,
          previous_state: projectWide.data.previous_state,
          reason: projectWide.data.reason,
          hard_bounce_rate: projectWide.data.hard_bounce_rate,
          sent: projectWide.data.sent,
          bounced_hard: projectWide.data.bounced_hard,
          limit: projectWide.data.thresholds.hard_bounce_limit,
        },
        {
          state: 'warning',
          previous_state: 'ok',
          reason: 'hard_bounce_rate',
          hard_bounce_rate: 0.03,
          sent: 97,
          bounced_hard: 3,
          limit: 0.05,
        },
      );
      // Judged again with nothing new: no second event.
      assert.equal(await t.services.reputation.evaluate(), 0);
    });

    test('past the limit: sending_paused; broadcasts refused, then every send with pause_all_sending', async () => {
      await outcomes(t.projectId, 'news.example', 'email.bounced', 3);
      assert.equal(await t.services.reputation.evaluate(), 2);
      const view = await reputation();
      assert.equal(view.project.state, 'paused');
      assert.equal(view.project.holds, 'broadcasts');
      assert.equal(view.sending_paused, true);
      const paused = (await receiver.waitFor(4)).slice(2).map((request) => JSON.parse(request.body));
      assert.deepEqual(
        paused.map((body) => body.type),
        ['project.sending_paused', 'project.sending_paused'],
      );
      assert.deepEqual(
        paused.map((body) => body.data.holds),
        ['broadcasts', 'broadcasts'],
      );

      // A broadcast is refused, sent through the API; a transactional send still goes.
      const segment = await t.request('POST', '/v1/segments', { body: { name: 'Readers' } });
      assert.equal(segment.status, 201, JSON.stringify(segment.body));
      const contact = await t.request('POST', '/v1/contacts', { body: { email: 'ada@example.org' } });
      assert.equal(contact.status, 201, JSON.stringify(contact.body));
      const added = await t.request('POST', `/v1/contacts/${contact.body.id}/segments/${segment.body.id}`);
      assert.equal(added.status, 200, JSON.stringify(added.body));
      const broadcast = await t.request('POST', '/v1/broadcasts', {
        body: {
          from: 'News <news@news.example>',
          subject: 'November',
          text: 'What happened this month.',
          segment_id: segment.body.id,
          send: true,
        },
      });
      assert.equal(broadcast.status, 403, JSON.stringify(broadcast.body));
      assert.equal(broadcast.body.error.code, 'sending_paused');
      assert.equal(broadcast.body.error.param, 'from');
      assert.match(broadcast.body.error.message, /^Sending is paused for the project since /);
      assert.equal((await send(undefined, 'news.example')).status, 202);

      const setting = await t.request('PATCH', '/v1/reputation', { body: { pause_all_sending: true } });
      assert.equal(setting.status, 200, JSON.stringify(setting.body));
      assert.equal(setting.body.pause_all_sending, true);
      assert.equal(setting.body.project.holds, 'all');

      const refused = await send(undefined, 'news.example');
      assert.equal(refused.status, 403);
      const rate = '5\\.83 %';
      assert.equal(refused.body.error.code, 'sending_paused');
      assert.equal(refused.body.error.param, 'from');
      assert.match(
        refused.body.error.message,
        new RegExp(
          `^Sending is paused for the project since .+: its hard-bounce rate over the last 7 days is ${rate}, past the 5\\.00 % limit\\. A full_access key resumes it \\(POST /v1/reputation/resume\\)`,
        ),
      );
      const batch = await t.request('POST', '/v1/emails/batch', {
        body: [{ from: 'news@news.example', to: 'ada@example.org', subject: 'Hi', text: 'Hello' }],
      });
      assert.equal(batch.status, 403);
      assert.equal(batch.body.error.code, 'sending_paused');
      assert.equal(batch.body.error.param, '[0].from');

      const resend = new Resend(t.key, { baseUrl: `${t.baseUrl}/resend` });
      const sent = await resend.emails.send({
        from: 'news@news.example',
        to: 'ada@example.org',
        subject: 'Hi',
        text: 'Hello',
      });
      assert.equal(sent.data, null);
      assert.match(sent.error!.message, /^Sending is paused for the project/);

      const transport = nodemailer.createTransport({
        host: '127.0.0.1',
        port: submission.port!,
        ignoreTLS: true,
        auth: { user: 'app', pass: t.key },
      });
      await assert.rejects(
        transport.sendMail({
          from: 'news@news.example',
          to: 'ada@example.org',
          subject: 'Hi',
          text: 'Hello',
        }),
        (error: { response?: string }) =>
          /^550 5\.7\.1 Sending is paused for the project/.test(error.response ?? ''),
      );
    });

    test('a resume needs full_access, emits sending_resumed, and counts only what comes after', async () => {
      const created = await t.request('POST', '/v1/api-keys', {
        body: { name: 'sender', permission: 'sending_access' },
      });
      const sendingKey = created.body.token as string;
      const denied = await t.request('POST', '/v1/reputation/resume', { key: sendingKey, body: {} });
      assert.equal(denied.status, 403);
      assert.equal(denied.body.error.code, 'insufficient_permission');

      const resumed = await t.request('POST', '/v1/reputation/resume', { body: {} });
      assert.equal(resumed.status, 200, JSON.stringify(resumed.body));
      assert.deepEqual(resumed.body, { object: 'reputation_resume', resumed: [null, 'news.example'] });
      const again = await t.request('POST', '/v1/reputation/resume', { body: {} });
      assert.equal(again.status, 409);
      assert.equal(again.body.error.code, 'not_paused');

      const events = (await receiver.waitFor(6)).slice(4).map((request) => JSON.parse(request.body));
      assert.deepEqual(
        events.map((body) => [body.type, body.data.state, body.data.previous_state, body.data.resumed_by]),
        [
          ['project.sending_resumed', 'ok', 'paused', 'api'],
          ['project.sending_resumed', 'ok', 'paused', 'api'],
        ],
      );
      assert.equal((await send(sendingKey, 'news.example')).status, 202);

      // The bounces before the resume are not judged again: the window starts after it.
      assert.equal(await t.services.reputation.evaluate(), 0);
      const view = await reputation();
      assert.equal(view.project.state, 'ok');
      assert.equal(view.project.bounced_hard, 0);
      assert.ok(view.project.resumed_at);
    });

    test('a domain pauses alone; its project only warns; the window forgets on the clock', async () => {
      const other = await t.createProject('second');
      // clean.example: 900 sent; noisy.example: 100 sent, 1 complaint (1 %: past the 0.3 % limit). The
      // project: 1 of 1,000 (0.1 %: the warning threshold).
      await outcomes(other.projectId, 'clean.example', 'email.sent', 900);
      await outcomes(other.projectId, 'noisy.example', 'email.sent', 100);
      await outcomes(other.projectId, 'noisy.example', 'email.complained', 1);
      assert.equal(await t.services.reputation.evaluate(), 2);
      const view = await reputation(other.key);
      assert.equal(view.project.state, 'warning');
      assert.equal(view.project.complaint_rate, 0.001);
      assert.deepEqual(
        view.domains.map((scope: any) => [scope.domain, scope.state, scope.reason, scope.complaint_rate]),
        [
          ['clean.example', 'ok', null, 0],
          ['noisy.example', 'paused', 'complaint_rate', 0.01],
        ],
      );
      const patched = await t.request('PATCH', '/v1/reputation', {
        key: other.key,
        body: { pause_all_sending: true },
      });
      assert.equal(patched.status, 200);
      const refused = await send(other.key, 'noisy.example');
      assert.equal(refused.status, 403);
      assert.match(
        refused.body.error.message,
        /^Sending is paused for the domain noisy\.example since .+: its complaint rate over the last 7 days is 1\.00 %, past the 0\.30 % limit\./,
      );
      assert.equal((await send(other.key, 'clean.example')).status, 202);
      // The first project is not paused by the second's domain.
      assert.equal((await send(undefined, 'noisy.example')).status, 202);

      // Eight days on, the window holds none of it: the project's warning clears; the pause holds until resumed.
      clock.advance(8 * DAY_MS);
      assert.equal(await t.services.reputation.evaluate(), 1);
      const later = await reputation(other.key);
      assert.equal(later.project.state, 'ok');
      assert.equal(later.project.sent, 0);
      assert.equal(later.domains.find((scope: any) => scope.domain === 'noisy.example').state, 'paused');
      assert.equal((await send(other.key, 'noisy.example')).status, 403);
    });
  });
}
