// The SMTP server both sides of bench/send.ts deliver to, in a process of its own: it accepts every message
// (reading it whole, as a real server does), counts them and tells the parent when a target is reached.
import { SMTPServer } from 'smtp-server';

type Message = { type: 'target'; count: number } | { type: 'cpu' } | { type: 'stop' };

let received = 0;
let target = Infinity;
const send = (message: object) => process.send!(message);

const server = new SMTPServer({
  logger: false,
  authOptional: true,
  disabledCommands: ['STARTTLS'],
  closeTimeout: 100,
  size: 10 * 1024 * 1024,
  onData(stream, _session, callback) {
    stream.on('data', () => {});
    stream.on('end', () => {
      received += 1;
      callback(null, 'Ok: queued');
      if (received >= target) {
        target = Infinity;
        send({ type: 'reached', count: received });
      }
    });
  },
});

server.listen(0, '127.0.0.1', () => {
  const address = server.server.address();
  send({ type: 'ready', port: typeof address === 'object' && address ? address.port : 0 });
});

// The parent went away (finished or gave up): nothing is left to serve.
process.on('disconnect', () => process.exit(0));

process.on('message', (message: Message) => {
  if (message.type === 'target') {
    target = message.count;
    if (received >= target) {
      target = Infinity;
      send({ type: 'reached', count: received });
    }
  } else if (message.type === 'cpu') {
    const usage = process.cpuUsage();
    send({ type: 'cpu', micros: usage.user + usage.system });
  } else if (message.type === 'stop') {
    server.close(() => process.exit(0));
  }
});
