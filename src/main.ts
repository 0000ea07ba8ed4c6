// The server process (`npm start`): configuration from the environment, then src/server.ts does the rest.
import { ConfigError, loadConfig } from './config.ts';
import { describeError } from './lib/operator-output.ts';
import { runServer } from './server.ts';

try {
  const config = loadConfig();
  await runServer(config, { worker: true });
} catch (error) {
  // Until the server runs there may be no logger; a plain line on stderr is what an operator reads.
  const message =
    error instanceof ConfigError ? error.message : `Postwire could not start: ${describeError(error)}`;
  process.stderr.write(`${message}\n`);
  process.exit(1);
}
