import { createFanOut, type FanOut, type FanOutDeps } from '../../src/modules/broadcasts/fan-out.ts';
import type { TestApp } from './app.ts';

/**
 * A broadcast fan-out on the test app's repositories and services, as src/services.ts builds the process's,
 * with `overrides` (a clock, a batch size, a repository that fails or hangs where a test says).
 */
export function fanOutOf(api: TestApp, overrides: Partial<FanOutDeps> = {}): FanOut {
  const { repositories, renderer, domains, events, notifiers } = api.services;
  return createFanOut({
    db: api.database.handle.db,
    repo: repositories.broadcasts,
    segments: repositories.segments,
    topics: repositories.topics,
    suppressions: repositories.suppressions,
    properties: repositories.contactProperties,
    templates: repositories.templates,
    renderer,
    emails: repositories.emails,
    tracking: repositories.tracking,
    senders: domains,
    events,
    clock: api.services.clock,
    sendNotifier: notifiers.send,
    ...overrides,
  });
}
