/** The pino subset the background workers log through (Fastify's logger fits). */
export interface WorkerLogger {
  info(object: object, message: string): void;
  warn(object: object, message: string): void;
  error(object: object, message: string): void;
}

export const silentWorkerLogger: WorkerLogger = { info() {}, warn() {}, error() {} };
