// What the commands and a process's start write for an operator: where text goes, and errors in one line.

/** A stream text is written to: standard output or error, or what a test captures. */
export interface Output {
  write(text: string): unknown;
}

/** One line about an error for an operator; connection errors can have an empty message and only a code. */
export function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const inner = error instanceof AggregateError ? error.errors.find((e) => e instanceof Error) : undefined;
  const message = error.message || (inner instanceof Error ? inner.message : '');
  const code = (error as NodeJS.ErrnoException).code;
  if (!message) return code ?? error.name;
  return code && !message.includes(code) ? `${message} (${code})` : message;
}
