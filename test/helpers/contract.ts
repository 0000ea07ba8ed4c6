import type { FastifyInstance } from 'fastify';

// Placeholder: checks every response against the OpenAPI document (being written).
export function installContractCheck(_app: FastifyInstance) {
  return { assertNoViolations() {} };
}
