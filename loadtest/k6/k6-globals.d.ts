// Globals that k6 provides but @types/k6 does not declare. Only what k6 really has: adding
// the "dom" lib instead would let browser APIs (fetch, window) type-check, and k6 has none.
declare const console: {
  log(...args: unknown[]): void;
  info(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
  debug(...args: unknown[]): void;
};
