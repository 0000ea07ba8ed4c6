import { simpleParser } from 'mailparser';
import type { Receiver } from './receiver.ts';

/** What a mail client sees of a message: its html, text and the headers tracking adds. */
export interface ParsedMail {
  html: string;
  text: string;
  listUnsubscribe: string | undefined;
  listUnsubscribePost: string | undefined;
  /** The open pixel's URL, the tracked links' URLs and the https unsubscribe URL, as found in the message. */
  pixel: string | undefined;
  links: string[];
  unsubscribeUrl: string | undefined;
}

export async function parseMail(raw: string): Promise<ParsedMail> {
  const parsed = await simpleParser(raw);
  const html = typeof parsed.html === 'string' ? parsed.html : '';
  const header = (name: string) => {
    const line = parsed.headerLines.find((entry) => entry.key === name.toLowerCase());
    return line ? line.line.slice(line.line.indexOf(':') + 1).trim() : undefined;
  };
  const listUnsubscribe = header('List-Unsubscribe');
  return {
    html,
    text: parsed.text ?? '',
    listUnsubscribe,
    listUnsubscribePost: header('List-Unsubscribe-Post'),
    pixel: /<img src="([^"]+)"/.exec(html)?.[1],
    links: [...html.matchAll(/<a\b[^>]*\shref="([^"]*)"/g)].map((match) => match[1]!.replace(/&amp;/g, '&')),
    unsubscribeUrl: listUnsubscribe ? /<(https?:[^>]+)>/.exec(listUnsubscribe)?.[1] : undefined,
  };
}

/** The webhook events the receiver got, parsed. */
export const receivedEvents = (receiver: Receiver): any[] =>
  receiver.requests.map((request) => JSON.parse(request.body));

/** Waits (on the receiver's own signal, no polling sleep) until an event matches; rejects after timeoutMs. */
export async function waitForEvent(
  receiver: Receiver,
  predicate: (event: any) => boolean,
  timeoutMs = 8000,
): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = receivedEvents(receiver).find(predicate);
    if (found) return found;
    const left = deadline - Date.now();
    if (left <= 0) throw new Error('timed out waiting for a webhook event');
    await receiver.waitFor(receiver.requests.length + 1, left);
  }
}

/** A mail client fetching a URL of a message: the path goes to the test server (which PUBLIC_URL stands for). */
export function onServer(url: string, baseUrl: string): string {
  const parsed = new URL(url);
  return `${baseUrl}${parsed.pathname}${parsed.search}`;
}

export const BROWSER =
  'Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15';
