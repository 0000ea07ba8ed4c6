// Building a message, Postwire's way against the library's: CPU per message to turn an email into the signed
// bytes that leave. Postwire: mailOptions() → buildMessage() (nodemailer's tree, written at once where
// src/modules/sending/fast-paths.ts can, line endings made CRLF, signed by dkim.ts). The library: nodemailer's
// stream transport building the same options with its own DKIM signer and CRLF line endings, as sendMail()
// would. Ratio: the library's CPU ÷ Postwire's (1 or more: what Postwire adds costs nothing over the library).
//
//   npm run bench:mime                     # the bench's receipt and the fidelity corpus, 3 rounds
//   npm run bench:mime -- --messages 2000 --rounds 5
import { generateKeyPairSync } from 'node:crypto';
import { parseArgs } from 'node:util';
import nodemailer, { type SendMailOptions } from 'nodemailer';
import type { EmailRecord } from '../src/modules/emails/emails.repo.ts';
import { buildMessage, mailOptions, messageSigners } from '../src/modules/sending/mime.ts';
import { fidelityCorpus } from '../test/helpers/mail-corpus.ts';
import { emailMessage, median } from './shared.ts';

const { values: args } = parseArgs({
  options: {
    messages: { type: 'string', default: '1000' },
    rounds: { type: 'string', default: '3' },
  },
});
const count = Number(args.messages);
const rounds = Number(args.rounds);

const keys = generateKeyPairSync('rsa', { modulusLength: 2048 });
const privateKey = keys.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const dkim = { domain: 'acme.example', selector: 'bench', privateKey };
const signer = messageSigners(dkim)(undefined);
const library = nodemailer.createTransport({
  streamTransport: true,
  buffer: true,
  newline: 'windows',
  dkim: { domainName: dkim.domain, keySelector: dkim.selector, privateKey },
});

/** An email as the sending worker loads it, from a send request's fields. */
function emailOf(i: number, body: Record<string, unknown>): EmailRecord {
  const attachments = (body.attachments ?? []) as Array<Record<string, string>>;
  return {
    id: `msg_${i}`,
    projectId: 'proj_bench',
    from: (body.from as string | undefined) ?? 'Bench <bench@example.com>',
    to: [`user${i}@example.org`],
    cc: (body.cc as string[] | undefined) ?? [],
    bcc: [],
    replyTo: (body.reply_to as string[] | undefined) ?? [],
    subject: (body.subject as string | undefined) ?? 'Template',
    html: (body.html as string | undefined) ?? null,
    text: (body.text as string | undefined) ?? null,
    headers: (body.headers as Record<string, string> | undefined) ?? {},
    tags: {},
    templateId: null,
    templateVersion: null,
    messageId: `<${i}.bench@acme.example>`,
    attachments: attachments.map((attachment) => {
      const content = Buffer.from(attachment.content!, 'base64');
      return {
        filename: attachment.filename!,
        contentType: attachment.content_type ?? null,
        contentId: attachment.content_id ?? null,
        size: content.length,
        content,
      };
    }),
    createdAt: '2026-11-26T10:00:00.000Z',
  } as unknown as EmailRecord;
}

/** CPU microseconds per message over `count` builds. */
async function cpuPerMessage(build: (i: number) => Promise<unknown>): Promise<number> {
  const start = process.cpuUsage();
  for (let i = 0; i < count; i += 1) await build(i);
  const used = process.cpuUsage(start);
  return (used.user + used.system) / count;
}

const sets: Array<[string, (i: number) => EmailRecord]> = [
  ["the bench's receipt", (i) => emailOf(i, emailMessage(i))],
  [
    'the fidelity corpus',
    (() => {
      const corpus = fidelityCorpus().filter((message) => !message.usesTemplate);
      return (i: number) => emailOf(i, corpus[i % corpus.length]!.body);
    })(),
  ],
];

console.log(`${count} messages a round, ${rounds} rounds, RSA-2048 signatures`);
for (const [name, emailFor] of sets) {
  const ours: number[] = [];
  const theirs: number[] = [];
  for (let round = 0; round < rounds; round += 1) {
    ours.push(
      await cpuPerMessage((i) => {
        const email = emailFor(i);
        return buildMessage(mailOptions(email, email.to), signer);
      }),
    );
    theirs.push(
      await cpuPerMessage((i) => {
        const email = emailFor(i);
        const { envelope: _envelope, ...options } = mailOptions(email, email.to) as SendMailOptions;
        return library.sendMail(options);
      }),
    );
  }
  const ratio = median(theirs.map((cpu, round) => cpu / ours[round]!));
  console.log(
    `${name}: postwire ${median(ours).toFixed(0)} µs, nodemailer ${median(theirs).toFixed(0)} µs CPU per message · ratio ${ratio.toFixed(2)} (aim ≥ 1)`,
  );
}
