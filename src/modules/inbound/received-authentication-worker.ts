// The thread of the received-mail authenticator (received-authentication.ts): checks each message it is
// handed with mailauth, asking its DNS questions back to the main thread (which holds the resolver that
// DNS_SERVERS configures), and answers with the results.
import { parentPort } from 'node:worker_threads';
import { lowerThreadPriority } from '../../lib/thread-pool.ts';
import {
  checkMessage,
  type FromAuthenticationThread,
  type ToAuthenticationThread,
} from './received-authentication.ts';

// Checking mail can wait; the API beside it cannot.
lowerThreadPriority();

const port = parentPort;
if (!port) throw new Error('received-authentication-worker runs on a worker thread');
const post = (message: FromAuthenticationThread) => port.postMessage(message);

const questions = new Map<number, { resolve(answer: unknown[]): void; reject(error: Error): void }>();
let nextQuery = 1;

port.on('message', (message: ToAuthenticationThread) => {
  if (message.kind === 'answer') {
    const question = questions.get(message.query);
    if (!question) return;
    questions.delete(message.query);
    if (message.error)
      question.reject(Object.assign(new Error(message.error.message), { code: message.error.code }));
    else question.resolve(message.answer ?? []);
    return;
  }
  const { id, raw, envelope, hostname, timeoutMs } = message;
  void checkMessage(Buffer.concat(raw), envelope, {
    hostname,
    timeoutMs,
    lookup: (name, type) =>
      new Promise((resolve, reject) => {
        const query = nextQuery++;
        questions.set(query, { resolve, reject });
        post({ kind: 'lookup', query, name, type });
      }),
  }).then((result) => post({ kind: 'result', id, result }));
});
