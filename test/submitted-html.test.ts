import assert from 'node:assert/strict';
import { once } from 'node:events';
import { test } from 'node:test';
import { Splitter } from '@zone-eu/mailsplit';
import { simpleParser } from 'mailparser';
import MailComposer from 'nodemailer/lib/mail-composer';
import {
  findSubmittedLinks,
  LARGE_SUBMISSION_BYTES,
  linksOfSubmitted,
  rewriteSubmittedHtml,
  submittedHtml,
  trackedSubmission,
  trackSubmission,
} from '../src/modules/emails/submitted-html.ts';
import { addOpenPixel, rewriteLinks, trackedHtml, trackedLinks } from '../src/modules/emails/tracked-html.ts';

// Tracking a submitted message rewrites its html part(s) in place (src/modules/emails/submitted-html.ts):
// mailsplit finds the parts, the splice and re-encoding are ours. Checked differentially: mailparser reads the
// rewritten message as the original with only the html changed, and mailsplit's pieces of it, html parts
// aside, are byte for byte the original's.

const build = (options: ConstructorParameters<typeof MailComposer>[0]) =>
  new MailComposer({ from: 'a@acme.example', to: 'b@receiver.test', subject: 's', ...options })
    .compile()
    .build();

const HTML =
  '<html><body><p>Read <a href="https://acme.example/a?x=1&amp;y=2">this</a> and <a href="https://acme.example/b">that</a>.</p></body></html>';
const LONG_LINE_HTML = `<p>${'word '.repeat(190)}<a href="https://acme.example/long">x</a></p>`;

const messages: Record<string, () => Promise<Buffer>> = {
  'alternative + attachment (quoted-printable html)': () =>
    build({
      text: 'Read this and that.\n',
      html: HTML,
      attachments: [{ filename: 'data.bin', content: Buffer.from([0, 1, 2, 255, 13, 10, 46]) }],
    }),
  'base64 html': () => build({ html: HTML, textEncoding: 'base64' }),
  'html only, 7bit': () => build({ html: '<p><a href="https://acme.example/c">c</a></p>' }),
  'ISO-8859-1 html, 8bit': async () =>
    Buffer.from(
      'From: a@acme.example\r\nSubject: s\r\nMIME-Version: 1.0\r\nContent-Type: text/html; charset=iso-8859-1\r\n' +
        'Content-Transfer-Encoding: 8bit\r\n\r\n<p>Gr\xfc\xdfe <a href="https://acme.example/d">d</a></p>\r\n',
      'latin1',
    ),
  'a line that would pass 998 octets (8bit becomes quoted-printable)': async () =>
    Buffer.from(
      'From: a@acme.example\r\nSubject: s\r\nMIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n' +
        `Content-Transfer-Encoding: 8bit\r\n\r\n${LONG_LINE_HTML}\r\n`,
      'latin1',
    ),
  'an attached html file and a forwarded message stay as they are': () =>
    build({
      text: 'see attached',
      html: HTML,
      attachments: [
        {
          filename: 'page.html',
          content: '<a href="https://acme.example/attached">x</a>',
          contentType: 'text/html',
        },
        {
          filename: 'fwd.eml',
          contentType: 'message/rfc822',
          content:
            'Subject: fwd\r\nContent-Type: text/html\r\n\r\n<a href="https://acme.example/fwd">x</a>\r\n',
        },
      ],
    }),
};

const track = (html: string) =>
  addOpenPixel(
    rewriteLinks(
      html,
      trackedLinks(html),
      (index) => `https://mail.acme.example/c/${index}?t=${'x'.repeat(120)}`,
    ),
    'https://mail.acme.example/o/pixel',
  );

/** mailsplit's pieces of a message, leaving out the html parts' header and body (what may change). */
async function piecesBesideHtml(raw: Buffer): Promise<string[]> {
  const splitter = new Splitter();
  const pieces: string[] = [];
  splitter.on('data', (data) => {
    const html = (data.type === 'node' ? data : data.node).contentType === 'text/html';
    if (data.type === 'node') pieces.push(html ? '<html part>' : data.getHeaders().toString('latin1'));
    else if (!(html && data.type === 'body')) pieces.push(data.value.toString('latin1'));
  });
  const ended = once(splitter, 'end');
  splitter.end(raw);
  await ended;
  return pieces;
}

for (const [name, make] of Object.entries(messages)) {
  test(`tracking a submitted message's html: ${name}`, async () => {
    const raw = await make();
    const before = await simpleParser(raw);
    const html = await submittedHtml(raw);
    const rewritten = await rewriteSubmittedHtml(raw, track);
    const after = await simpleParser(rewritten);

    const forwarding = name.startsWith('an attached html');
    // (mailparser shows a forwarded message's html after the message's own.)
    if (!forwarding) assert.equal(after.html, track(before.html as string), 'the html is the tracked html');
    // (Without a text part mailparser makes the text from the html.)
    if (/^Content-Type: text\/plain/im.test(raw.toString('latin1'))) {
      assert.equal(after.text, before.text, 'the text part is as it was');
    }
    assert.deepEqual(
      after.attachments.map((a) => [a.filename, a.contentType, a.checksum]),
      before.attachments.map((a) => [a.filename, a.contentType, a.checksum]),
      'attachments as they were',
    );
    if (forwarding) {
      assert.deepEqual(html, [HTML], 'only the message html is found');
      assert.ok((after.html as string).startsWith(track(HTML)));
      assert.match(
        after.html as string,
        /<a href="https:\/\/acme\.example\/fwd">/,
        'forwarded html as it was',
      );
      const attached = after.attachments.find((a) => a.filename === 'page.html')!;
      assert.equal(attached.content.toString(), '<a href="https://acme.example/attached">x</a>');
    }
    // Every piece but the html parts' is byte for byte the original's.
    const [original, tracked] = [await piecesBesideHtml(raw), await piecesBesideHtml(rewritten)];
    if (name.startsWith('a line that would')) {
      // The one header changed: the part is the whole message, its header is the message's.
      assert.match(rewritten.toString('latin1'), /^Content-Transfer-Encoding: quoted-printable\r$/m);
      assert.ok(
        rewritten
          .toString('latin1')
          .split('\r\n')
          .every((line) => line.length <= 998),
      );
    } else {
      assert.deepEqual(tracked, original);
    }
    // Untracked (an identity rewrite): the same bytes.
    assert.ok((await rewriteSubmittedHtml(raw, (text) => text)).equals(raw));
  });
}

test('a large submitted message is found and tracked on a thread, to the same links and bytes as here', async () => {
  // Past LARGE_SUBMISSION_BYTES: a file beside the html, and html in base64 and in quoted-printable.
  const file = Buffer.alloc(LARGE_SUBMISSION_BYTES, 7);
  const tracking = {
    links: ['https://acme.example/a?x=1&y=2', 'https://acme.example/b'],
    clickUrls: ['https://t.acme.example/c/1', 'https://t.acme.example/c/2'],
    openUrl: 'https://t.acme.example/o/1',
  };
  for (const textEncoding of ['base64', 'quoted-printable'] as const) {
    const raw = await build({
      html: HTML,
      textEncoding,
      attachments: [{ filename: 'f.bin', content: file }],
    });
    assert.ok(raw.length > LARGE_SUBMISSION_BYTES);
    // Cut as a socket would: the thread gets the chunks, here they are joined.
    const chunks = [raw.subarray(0, 1000), raw.subarray(1000, 70_000), raw.subarray(70_000)];
    assert.deepEqual(await findSubmittedLinks(chunks), await linksOfSubmitted(chunks));
    assert.deepEqual(await findSubmittedLinks(chunks), tracking.links);
    const onThread = Buffer.concat(await trackSubmission(chunks, tracking));
    const here = Buffer.concat(await trackedSubmission(chunks, tracking));
    assert.ok(onThread.equals(here), `${textEncoding}: the thread's copy is this thread's`);
    const parsed = await simpleParser(onThread);
    assert.equal(parsed.html, trackedHtml(HTML, tracking));
    assert.equal(parsed.attachments[0]!.checksum, (await simpleParser(raw)).attachments[0]!.checksum);
  }
});
