import type { Config } from './config.ts';
import type { DatabaseHandle } from './db/connection.ts';
import type { Clock } from './lib/clock.ts';
import type { SecretBox } from './lib/crypto.ts';
import type { Resolver } from './lib/network-policy.ts';
import {
  createDeliveryWorker,
  deliverySettingsFromConfig,
  type WorkerLogger,
} from './modules/deliveries/deliveries.worker.ts';
import type { DeliveryNotifier } from './modules/deliveries/notifier.ts';

export interface WorkersDeps {
  config: Config;
  database: DatabaseHandle;
  clock: Clock;
  secretBox: SecretBox;
  resolver: Resolver;
  logger: WorkerLogger;
  /** Shared with the app in the same process, so what the API writes is picked up at once. */
  deliveryNotifier?: DeliveryNotifier | undefined;
}

export interface RunningWorkers {
  /** Stops claiming, lets attempts in flight finish (bounded), and gives back what is still held. */
  stop(): Promise<void>;
}

/** The background work of a process: webhook delivery. Run in the API process, or alone (`postwire worker`). */
export async function startWorkers(deps: WorkersDeps): Promise<RunningWorkers> {
  const delivery = createDeliveryWorker({
    database: deps.database,
    clock: deps.clock,
    secretBox: deps.secretBox,
    resolver: deps.resolver,
    allowPrivateUrls: deps.config.allowPrivateUrls,
    settings: deliverySettingsFromConfig(deps.config),
    notifier: deps.deliveryNotifier,
    logger: deps.logger,
  });
  await delivery.start();
  return {
    async stop() {
      await delivery.stop();
    },
  };
}
