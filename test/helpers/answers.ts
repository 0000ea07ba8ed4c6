import assert from 'node:assert/strict';
import type { ApiResponse, TestApp } from './app.ts';

// What tests of the audience's resources (segments, topics) assert of an answer, written once.

/** A Postwire error body, exactly. */
export function assertApiError(
  response: ApiResponse,
  status: number,
  code: string,
  message: string,
  param?: string,
): void {
  assert.equal(response.status, status, JSON.stringify(response.body));
  assert.deepEqual(response.body, {
    error: {
      code,
      message,
      ...(param === undefined ? {} : { param }),
      request_id: response.headers.get('x-request-id'),
    },
  });
}

/** POSTs `body` and answers the 201's body. */
export async function created(api: TestApp, path: string, body: unknown, key?: string) {
  const response = await api.request('POST', path, { body, ...(key ? { key } : {}) });
  assert.equal(response.status, 201, JSON.stringify(response.body));
  return response.body;
}

/** The ids of a list answer, in its order. */
export const idsOf = (response: ApiResponse): string[] =>
  response.body.data.map((item: { id: string }) => item.id);

/** A `resend` SDK call that failed, with Resend's error exactly. */
export function assertResendError(
  result: { data: unknown; error: unknown },
  statusCode: number,
  name: string,
  message: string,
): void {
  assert.equal(result.data, null);
  assert.deepEqual(result.error, { statusCode, name, message });
}

/** The data of a `resend` SDK call that succeeded. */
export function dataOf<T>(result: { data: T | null; error: unknown }): T {
  assert.equal(result.error, null, JSON.stringify(result.error));
  return result.data as T;
}
