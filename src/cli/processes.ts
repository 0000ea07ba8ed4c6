// The commands that run a process until a signal: `serve`, `submission` and `worker`.
import { runServer, runSubmission, runWorker } from '../server.ts';
import type { Command } from './command.ts';

export const processCommands: Command[] = [
  {
    words: ['serve'],
    options: { worker: { type: 'boolean', default: true }, inbound: { type: 'boolean', default: true } },
    async run({ config }, values) {
      await runServer(config, { worker: values.worker !== false, inbound: values.inbound !== false });
      return undefined;
    },
  },
  {
    words: ['submission'],
    async run({ config }) {
      await runSubmission(config);
      return undefined;
    },
  },
  {
    words: ['worker'],
    options: { inbound: { type: 'boolean', default: true } },
    async run({ config }, values) {
      await runWorker(config, { inbound: values.inbound !== false });
      return undefined;
    },
  },
];
