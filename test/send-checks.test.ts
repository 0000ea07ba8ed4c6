import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  checkHeaders,
  checkOwnContent,
  checkRecipients,
  checkScheduledAt,
  checkTags,
  MAX_RECIPIENTS,
  parseList,
  resolveTracking,
} from '../src/modules/emails/send-checks.ts';

// A send's input checks, without a database or a server: what each one answers, and the field a refusal names.

/** The field a refusal names (its `param`), and its code. */
function refusal(check: () => unknown): { param: string | undefined; code: string } {
  try {
    check();
  } catch (error) {
    const { param, code } = error as { param?: string; code: string };
    return { param, code };
  }
  assert.fail('the check let it through');
}

test('addresses: one field or a list, the exact item at fault named', () => {
  assert.deepEqual(
    parseList(['a@example.org', 'B <b@example.org>'], 'to').map((address) => address.address),
    ['a@example.org', 'b@example.org'],
  );
  assert.deepEqual(
    refusal(() => parseList(['a@example.org', 'nope'], '[2].to')),
    {
      param: '[2].to[1]',
      code: 'invalid_address',
    },
  );
  assert.deepEqual(
    refusal(() => parseList('nope', 'from')),
    { param: 'from', code: 'invalid_address' },
  );
});

test('recipients: one per address across to, cc and bcc, at most MAX_RECIPIENTS', () => {
  const list = (...addresses: string[]) => parseList(addresses, 'to');
  const recipients = checkRecipients(
    { to: list('a@example.org'), cc: list('A@example.org', 'c@example.org'), bcc: list('d@example.org') },
    '',
  );
  assert.deepEqual(
    recipients.map(({ type, address, position }) => [type, address, position]),
    [
      ['to', 'a@example.org', 0],
      ['cc', 'c@example.org', 1],
      ['bcc', 'd@example.org', 2],
    ],
  );
  const many = Array.from({ length: MAX_RECIPIENTS + 1 }, (_, index) => `r${index}@example.org`);
  assert.deepEqual(
    refusal(() => checkRecipients({ to: list(...many), cc: [], bcc: [] }, '[1].')),
    {
      param: '[1].to',
      code: 'parameter_invalid',
    },
  );
});

test('headers: reserved names, names given twice and line breaks are refused', () => {
  assert.deepEqual(checkHeaders({ 'X-Entity-Ref': '42' }, ''), { 'X-Entity-Ref': '42' });
  assert.deepEqual(checkHeaders(undefined, ''), {});
  assert.deepEqual(
    refusal(() => checkHeaders({ 'Content-Language': 'en' }, '')),
    {
      param: 'headers.Content-Language',
      code: 'header_reserved',
    },
  );
  assert.equal(refusal(() => checkHeaders({ 'X-A': '1', 'x-a': '2' }, '')).param, 'headers.x-a');
  assert.equal(refusal(() => checkHeaders({ 'X-A': 'one\r\nBcc: b@example.org' }, '')).param, 'headers.X-A');
  assert.equal(refusal(() => checkHeaders({ 'X A': '1' }, '')).param, 'headers.X A');
});

test("tags: an object or Resend's list, names and values in the tag alphabet", () => {
  assert.deepEqual(checkTags({ campaign: 'spring' }, ''), { campaign: 'spring' });
  assert.deepEqual(checkTags([{ name: 'campaign', value: 'spring' }], ''), { campaign: 'spring' });
  assert.equal(
    refusal(() =>
      checkTags(
        [
          { name: 'a', value: '1' },
          { name: 'a', value: '2' },
        ],
        '',
      ),
    ).param,
    'tags[1].name',
  );
  assert.equal(refusal(() => checkTags({ campaign: 'spring sale' }, '[0].')).param, '[0].tags.campaign');
});

test('scheduled_at: a time that has come is now, at most 30 days ahead', () => {
  const now = new Date('2026-01-01T00:00:00Z');
  assert.equal(checkScheduledAt(undefined, now, ''), null);
  assert.equal(checkScheduledAt('2025-12-31T23:00:00Z', now, ''), null);
  assert.equal(checkScheduledAt('2026-01-02T01:00:00+01:00', now, ''), '2026-01-02T00:00:00.000Z');
  assert.equal(refusal(() => checkScheduledAt('2026-02-01T00:00:01Z', now, '')).param, 'scheduled_at');
  assert.equal(refusal(() => checkScheduledAt('tomorrow', now, '[3].')).param, '[3].scheduled_at');
});

test('tracking: the send, else the defaults; refused without PUBLIC_URL or with own List-Unsubscribe', () => {
  const defaults = { trackOpens: false, trackClicks: true, listUnsubscribe: false };
  const configured = { publicUrl: 'https://mail.example.org', defaults };
  assert.deepEqual(resolveTracking({ tracking: { opens: true } } as never, {}, '', configured), {
    opens: true,
    clicks: true,
    unsubscribe: false,
  });
  assert.equal(resolveTracking({ tracking: { clicks: false } } as never, {}, '', configured), undefined);
  assert.deepEqual(
    refusal(() => resolveTracking({} as never, {}, '', { publicUrl: undefined, defaults })),
    {
      param: 'tracking.clicks',
      code: 'public_url_missing',
    },
  );
  assert.deepEqual(
    refusal(() =>
      resolveTracking({ unsubscribe: true } as never, { 'List-Unsubscribe': '<x>' }, '', configured),
    ),
    { param: 'headers.List-Unsubscribe', code: 'parameter_conflict' },
  );
});

test('own content: a subject, and html, text or both; text derived from html', () => {
  const content = checkOwnContent({ subject: 'Hi', html: '<p>Hello <b>there</b></p>' } as never, '');
  assert.equal(content.subject, 'Hi');
  assert.equal(content.text, 'Hello there');
  assert.deepEqual(
    refusal(() => checkOwnContent({ html: '<p>x</p>' } as never, '')),
    {
      param: 'subject',
      code: 'parameter_missing',
    },
  );
  assert.deepEqual(
    refusal(() => checkOwnContent({ subject: 'Hi' } as never, '[0].')),
    {
      param: '[0].html',
      code: 'parameter_missing',
    },
  );
  assert.equal(refusal(() => checkOwnContent({ subject: 'a\nb', text: 'x' } as never, '')).param, 'subject');
});
