// A line diff (longest common subsequence), enough to compare two template versions side by side. Templates
// are at most 512 KiB, but a diff of two very long bodies would be quadratic: past the limit the changed
// middle is shown as removed-then-added, which is still correct, only less precise.
const LIMIT = 4_000_000;

/** [{ op: ' ' | '-' | '+', line }] turning `a` into `b`. */
export function diffLines(a, b) {
  const left = (a ?? '').split('\n');
  const right = (b ?? '').split('\n');
  let start = 0;
  while (start < left.length && start < right.length && left[start] === right[start]) start++;
  let endLeft = left.length;
  let endRight = right.length;
  while (endLeft > start && endRight > start && left[endLeft - 1] === right[endRight - 1]) {
    endLeft--;
    endRight--;
  }
  const head = left.slice(0, start).map((line) => ({ op: ' ', line }));
  const tail = left.slice(endLeft).map((line) => ({ op: ' ', line }));
  const x = left.slice(start, endLeft);
  const y = right.slice(start, endRight);
  if (x.length * y.length > LIMIT) {
    return [
      ...head,
      ...x.map((line) => ({ op: '-', line })),
      ...y.map((line) => ({ op: '+', line })),
      ...tail,
    ];
  }
  // lengths[i][j]: the longest common subsequence of x[i…] and y[j…].
  const lengths = Array.from({ length: x.length + 1 }, () => new Uint32Array(y.length + 1));
  for (let i = x.length - 1; i >= 0; i--) {
    for (let j = y.length - 1; j >= 0; j--) {
      lengths[i][j] =
        x[i] === y[j] ? lengths[i + 1][j + 1] + 1 : Math.max(lengths[i + 1][j], lengths[i][j + 1]);
    }
  }
  const middle = [];
  let i = 0;
  let j = 0;
  while (i < x.length && j < y.length) {
    if (x[i] === y[j]) {
      middle.push({ op: ' ', line: x[i] });
      i++;
      j++;
    } else if (lengths[i + 1][j] >= lengths[i][j + 1]) middle.push({ op: '-', line: x[i++] });
    else middle.push({ op: '+', line: y[j++] });
  }
  while (i < x.length) middle.push({ op: '-', line: x[i++] });
  while (j < y.length) middle.push({ op: '+', line: y[j++] });
  return [...head, ...middle, ...tail];
}
