import { createHash } from 'node:crypto';

// Messages as senders really write them, for the tests that check what a receiving server gets: many lines
// with LF, CRLF and CR, html, Unicode everywhere, long lines, dots and "From " at line starts, trailing white
// space, attachments, folded headers, tracking, templates. One-line bodies hide line-ending bugs; these do not.

/** A send request of the corpus, with what the receiver must read back from it. */
export interface CorpusMessage {
  name: string;
  /** The POST /v1/emails body (`from` and `to` are filled in by the test). */
  body: Record<string, unknown>;
  /** Needs a published template named by `template.id` = `{{template}}` (see CORPUS_TEMPLATE). */
  usesTemplate?: boolean;
  /** Needs PUBLIC_URL (tracking or unsubscribe). */
  usesEngagement?: boolean;
  expect: {
    subject: string;
    /** The text part as read back, line breaks as LF; a RegExp when it is made (from html or a template). */
    text?: string | RegExp;
    /** The html part as read back; a RegExp when it is rewritten (tracking) or made (a template). */
    html?: string | RegExp;
    /** Each attachment's file name, content type and the SHA-256 of its bytes. */
    attachments?: Array<{ filename: string; contentType: string; sha256: string; contentId?: string }>;
    /** Header values the receiver must see (lower-case names), decoded. */
    headers?: Record<string, string>;
    cc?: string[];
    replyTo?: string[];
  };
}

export const sha256 = (bytes: Buffer): string => createHash('sha256').update(bytes).digest('hex');

/** A 1×1 PNG, and a binary file with every byte value (CR and LF among them). */
const PNG = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==',
  'base64',
);
const EVERY_BYTE = Buffer.from(Array.from({ length: 512 }, (_, index) => index % 256));

const LF_TEXT = [
  'Hi Ada,',
  '',
  'Your order #1042 has shipped. It should arrive on Thursday.',
  '',
  '  Item            Qty   Price',
  '  Blue mug          2   $18.00',
  '  Tea (loose)       1    $9.50',
  '',
  'Track it at https://shop.example/track/1042?ref=mail&utm_source=postwire',
  '',
  'Thanks,',
  'The Shop team',
  '',
].join('\n');

const HTML_PAGE = `<!doctype html>
<html>
  <head>
    <meta charset="utf-8">
    <title>Receipt</title>
    <style>
      body { font-family: sans-serif; }
      .total { font-weight: bold; }
    </style>
  </head>
  <body>
    <h1>Thanks for your order</h1>
    <p>Hi Ada,</p>
    <p>Your order <b>#1042</b> has shipped.</p>
    <table>
      <tr><td>Blue mug</td><td>2</td><td>$18.00</td></tr>
      <tr><td>Tea</td><td>1</td><td>$9.50</td></tr>
      <tr class="total"><td>Total</td><td></td><td>$27.50</td></tr>
    </table>
    <p><a href="https://shop.example/orders/1042">See your order</a></p>
  </body>
</html>
`;

const lf = (text: string) => text.replace(/\r\n|\r/g, '\n');

/** The corpus: at least twenty messages, each a way real senders write mail. */
export function fidelityCorpus(): CorpusMessage[] {
  const crlfText = LF_TEXT.replace(/\n/g, '\r\n');
  const unicodeText =
    'Grüße aus Köln — ça va? Ñandú.\n日本語のテキストです。\n한국어 텍스트\n😀🎉 emoji 👩‍👩‍👧\n';
  const longLine = `${'A long line without a single break '.repeat(60)}end.`;
  const dots = [
    '.',
    '..',
    '...',
    '.hidden',
    'From the desk of Ada',
    'From: not a header',
    '>From quoted',
    '',
  ].join('\n');
  const trailing = 'spaces at the end   \ntabs at the end\t\t\nboth \t \n  leading and trailing  \nlast';
  const blankEnd = 'Body with blank lines after it\n\n\n\n';
  const attachmentsHtml = '<p>Our logo:</p>\n<p><img src="cid:logo@shop.example" alt="logo"></p>\n<p>Bye</p>';
  const csv = 'name,amount\r\nAda,10\r\nGrace,20\r\n';
  const eightBit = 'ÿþýüûúùø÷öõôóòñðïîíìëêéèçæåäãâáàßÞÝÜÛÚÙØ×ÖÕÔÓÒÑÐÏÎÍÌËÊÉÈÇÆÅÄÃÂÁÀ\nàéîõü\n';
  const code = 'function greet(name) {\n\tif (!name) {\n\t\treturn "hi";\n\t}\n\treturn `hi ${name}`;\n}\n';
  const mixed = 'CRLF line\r\nLF line\nCR line\rlast line\r\n';
  const minified = `<div>${Array.from({ length: 200 }, (_, index) => `<span class="c${index}">item ${index}</span>`).join('')}</div>`;
  const longSubject =
    'Your weekly summary: 12 new comments, 3 mentions, 5 pull requests waiting for review, and an update about the release schedule for the next quarter';
  const oneWordSubject = `Word${'x'.repeat(990)}`;

  return [
    {
      name: 'multi-line text with LF',
      body: { subject: 'Your order has shipped', text: LF_TEXT },
      expect: { subject: 'Your order has shipped', text: LF_TEXT },
    },
    {
      name: 'multi-line text with CRLF',
      body: { subject: 'Your order has shipped (CRLF)', text: crlfText },
      expect: { subject: 'Your order has shipped (CRLF)', text: LF_TEXT },
    },
    {
      name: 'html only',
      body: { subject: 'Receipt', html: HTML_PAGE },
      expect: { subject: 'Receipt', html: HTML_PAGE, text: /Thanks for your order[\s\S]*Blue mug/i },
    },
    {
      name: 'html and text',
      body: { subject: 'Receipt with text', html: HTML_PAGE, text: LF_TEXT },
      expect: { subject: 'Receipt with text', html: HTML_PAGE, text: LF_TEXT },
    },
    {
      name: 'non-ASCII subject, display names and body',
      body: {
        from: 'Zoë Ümlaut 日本 <hello@acme.example>',
        subject: 'Grüße, 日本語 und Emoji 🎉 im Betreff',
        text: unicodeText,
        html: `<p>${unicodeText.replace(/\n/g, '<br>\n')}</p>`,
      },
      expect: {
        subject: 'Grüße, 日本語 und Emoji 🎉 im Betreff',
        text: unicodeText,
        html: `<p>${unicodeText.replace(/\n/g, '<br>\n')}</p>`,
      },
    },
    {
      name: 'a line over 998 characters',
      body: { subject: 'Long line', text: `Before\n${longLine}\nAfter\n`, html: `<p>${longLine}</p>` },
      expect: { subject: 'Long line', text: `Before\n${longLine}\nAfter\n`, html: `<p>${longLine}</p>` },
    },
    {
      name: 'lines that are dots or start with From',
      body: { subject: 'Dots', text: dots, html: `<pre>\n${dots}\n</pre>` },
      expect: { subject: 'Dots', text: dots, html: `<pre>\n${dots}\n</pre>` },
    },
    {
      name: 'trailing spaces and tabs',
      body: { subject: 'Trailing white space', text: trailing },
      expect: { subject: 'Trailing white space', text: trailing },
    },
    {
      name: 'blank lines at the end',
      body: { subject: 'Blank end', text: blankEnd, html: '<p>Blank end</p>\n\n\n' },
      expect: { subject: 'Blank end', text: blankEnd, html: '<p>Blank end</p>\n\n\n' },
    },
    {
      name: 'a binary attachment and an inline image',
      body: {
        subject: 'Files',
        html: attachmentsHtml,
        text: 'See the attached files.\nThe logo is inline.\n',
        attachments: [
          { filename: 'bytes.bin', content: EVERY_BYTE.toString('base64') },
          {
            filename: 'logo.png',
            content: PNG.toString('base64'),
            content_type: 'image/png',
            content_id: 'logo@shop.example',
          },
          { filename: 'report.csv', content: Buffer.from(csv).toString('base64'), content_type: 'text/csv' },
          { filename: 'Übersicht 2026.pdf', content: Buffer.from('%PDF-1.4\n%âãÏÓ\n').toString('base64') },
        ],
      },
      expect: {
        subject: 'Files',
        html: attachmentsHtml,
        text: 'See the attached files.\nThe logo is inline.\n',
        attachments: [
          { filename: 'bytes.bin', contentType: 'application/octet-stream', sha256: sha256(EVERY_BYTE) },
          {
            filename: 'logo.png',
            contentType: 'image/png',
            sha256: sha256(PNG),
            contentId: 'logo@shop.example',
          },
          { filename: 'report.csv', contentType: 'text/csv', sha256: sha256(Buffer.from(csv)) },
          {
            filename: 'Übersicht 2026.pdf',
            contentType: 'application/pdf',
            sha256: sha256(Buffer.from('%PDF-1.4\n%âãÏÓ\n')),
          },
        ],
      },
    },
    {
      name: 'reply-to, cc, bcc and custom headers',
      body: {
        subject: 'Headers',
        text: 'Headers test\nsecond line\n',
        cc: ['Grace Hopper <grace@receiver.test>'],
        bcc: ['secret@receiver.test'],
        reply_to: ['Support Desk <support@acme.example>'],
        headers: { 'X-Entity-Ref-ID': 'order-1042', 'X-Notes': 'Prüfung läuft — ok', 'X-Campaign': 'weekly' },
      },
      expect: {
        subject: 'Headers',
        text: 'Headers test\nsecond line\n',
        cc: ['grace@receiver.test'],
        replyTo: ['support@acme.example'],
        headers: { 'x-entity-ref-id': 'order-1042', 'x-notes': 'Prüfung läuft — ok', 'x-campaign': 'weekly' },
      },
    },
    {
      name: 'a subject long enough to fold',
      body: { subject: longSubject, text: 'Summary\nbelow\n' },
      expect: { subject: longSubject, text: 'Summary\nbelow\n' },
    },
    {
      name: 'a subject of one word longer than a line',
      body: { subject: oneWordSubject, text: 'One long word.\n' },
      expect: { subject: oneWordSubject, text: 'One long word.\n' },
    },
    {
      name: 'tracked html with one-click unsubscribe',
      usesEngagement: true,
      body: {
        subject: 'Newsletter',
        html: '<h1>News</h1>\n<p>Read <a href="https://blog.example/post-1">the first post</a>.</p>\n<p>And <a href="https://blog.example/post-2">another</a>.</p>\n',
        text: 'News\n\nRead the first post: https://blog.example/post-1\n',
        tracking: { opens: true, clicks: true },
        unsubscribe: true,
      },
      expect: {
        subject: 'Newsletter',
        html: /<h1>News<\/h1>[\s\S]*the first post[\s\S]*another/,
        text: /News\n\nRead the first post/,
        headers: { 'list-unsubscribe-post': 'List-Unsubscribe=One-Click' },
      },
    },
    {
      name: 'a published template whose loop makes many lines',
      usesTemplate: true,
      body: {
        template: {
          id: '{{template}}',
          variables: {
            name: 'Ada',
            items: Array.from({ length: 40 }, (_, index) => ({
              title: `Item ${index + 1}`,
              price: index * 3,
            })),
          },
        },
      },
      expect: {
        subject: 'Your 40 items, Ada',
        text: /Hi Ada,\n\n- Item 1: \$0\n- Item 2: \$3\n[\s\S]*- Item 40: \$117\n/,
        html: /<li>Item 1 — \$0<\/li>\n<li>Item 2 — \$3<\/li>[\s\S]*<li>Item 40 — \$117<\/li>/,
      },
    },
    {
      name: 'an empty text with html',
      body: { subject: 'Empty text', text: '', html: '<p>Only html here</p>\n<p>Two paragraphs</p>\n' },
      expect: { subject: 'Empty text', html: '<p>Only html here</p>\n<p>Two paragraphs</p>\n' },
    },
    {
      name: '8-bit content',
      body: { subject: 'Latin-1 range: àéîõü ÿ', text: eightBit, html: `<p>${eightBit}</p>` },
      expect: { subject: 'Latin-1 range: àéîõü ÿ', text: eightBit, html: `<p>${eightBit}</p>` },
    },
    {
      name: 'indented code with tabs',
      body: { subject: 'Code', text: code },
      expect: { subject: 'Code', text: code },
    },
    {
      name: 'mixed CRLF, LF and CR line breaks',
      body: { subject: 'Mixed breaks', text: mixed, html: `<p>one</p>\r\n<p>two</p>\n<p>three</p>\r` },
      expect: { subject: 'Mixed breaks', text: lf(mixed), html: '<p>one</p>\n<p>two</p>\n<p>three</p>\n' },
    },
    {
      name: 'minified html on one long line',
      body: { subject: 'Minified', html: minified },
      expect: { subject: 'Minified', html: minified, text: /^item 0item 1item 2[\s\S]*item 199$/ },
    },
    {
      name: 'mostly CJK text',
      body: {
        subject: '会議の議事録',
        text: '本日の会議の議事録です。\n次回は来週の月曜日です。\n'.repeat(30),
      },
      expect: {
        subject: '会議の議事録',
        text: '本日の会議の議事録です。\n次回は来週の月曜日です。\n'.repeat(30),
      },
    },
    {
      name: 'equals signs and soft-break look-alikes',
      body: { subject: 'a=b', text: 'a=b\n=\n=3D\nline ending in equals=\n=?UTF-8?Q?not_a_word?=\n' },
      expect: { subject: 'a=b', text: 'a=b\n=\n=3D\nline ending in equals=\n=?UTF-8?Q?not_a_word?=\n' },
    },
  ];
}

/** The template the corpus's template message sends: a loop that makes a line per item. */
export const CORPUS_TEMPLATE = {
  name: 'Items',
  subject: 'Your {{ items | size }} items, {{ name }}',
  text: 'Hi {{ name }},\n\n{% for item in items %}- {{ item.title }}: ${{ item.price }}\n{% endfor %}\nBye\n',
  html: '<p>Hi {{ name }},</p>\n<ul>\n{% for item in items %}<li>{{ item.title }} — ${{ item.price }}</li>\n{% endfor %}</ul>\n',
  variables: ['name', 'items'],
};
