// payments.js: the chaos scenario's load, for k6 in the compose stack. It does what the Go
// load generator of the native stack does (internal/chaos/load/loadgen.go): ITERATIONS payments
// (100) sent in parallel by VUS virtual users (20), each with its own Idempotency-Key, each
// retried with the same key until the API accepts it; then each payment goes on through
// one of the five lifecycle plans of internal/chaos/load/lifecycleload.go (n % 5: capture and
// two refunds; capture; cancel; capture and cancel at once; capture then two refunds of
// 60% at once), so that the relay holds several events of one payment while the faults
// run. In a race exactly one request must get 200 and the other 409.
//
// With several API replicas (BASE_URLS, as the compose stack's api and api-2) the requests
// are spread as the Go generator spreads them over `make chaos`'s two processes, like a
// round-robin load balancer: attempt a of payment n goes to replica n+a, and attempt a of
// a transition to replica n+step+a (step 1 capture, 2 cancel, 3 and 4 the refunds), so a
// retry reaches another replica and the two requests of a race reach two.
//
//   docker compose -f deploy/docker-compose.yml --profile load run --rm k6
//
// Environment (all optional): BASE_URLS (comma-separated API replicas; default BASE_URL,
// itself http://api:8080 by default), RUN_ID (prefix of the keys; give
// each run its own), ITERATIONS, VUS, MAX_ATTEMPTS (10), READY_TIMEOUT_S (120),
// RESULTS_DIR (/results), LARGEST_EVERY (0: none; the poison scenario's 20 makes every 20th
// payment the largest valid one: a 64-character user id and a 19-digit amount, captured
// and refunded in full),
// LIFECYCLE (1; 0 sends creations only), API_KEY (sent as "Authorization: Bearer <key>"
// with every payment request; our API needs one, made by `api keys create --merchant k6`;
// unset, none is sent). The run fails (exit code 99) unless every
// payment was accepted, every 503 carried Retry-After and every race had exactly one
// winner.
//
// k6 is not run in CI; scripts/check-k6.sh checks this file's syntax and its use of the
// k6 API against @types/k6.
import http from 'k6/http';
import exec from 'k6/execution';
import { check, fail, sleep } from 'k6';
import { Counter, Trend } from 'k6/metrics';

const BASE_URLS = (__ENV.BASE_URLS || __ENV.BASE_URL || 'http://api:8080')
  .split(',')
  .map((u) => u.trim().replace(/\/+$/, ''))
  .filter((u) => u !== '');
const RUN_ID = __ENV.RUN_ID || `k6-${Date.now()}`;
const ITERATIONS = positiveInt('ITERATIONS', 100);
const VUS = positiveInt('VUS', 20);
const MAX_ATTEMPTS = positiveInt('MAX_ATTEMPTS', 10);
const READY_TIMEOUT_S = positiveInt('READY_TIMEOUT_S', 120);
const RESULTS_DIR = __ENV.RESULTS_DIR || '/results';
const LARGEST_EVERY = __ENV.LARGEST_EVERY ? positiveInt('LARGEST_EVERY', 0) : 0;
const LARGEST_USER_ID_PREFIX = 'chaos-large-';
const LIFECYCLE = (__ENV.LIFECYCLE || '1') !== '0';
const API_KEY = __ENV.API_KEY || '';

/**
 * withKey adds the API key, when there is one, to the headers of a payment request.
 * @param {Record<string, string>} headers
 * @returns {Record<string, string>}
 */
function withKey(headers) {
  if (API_KEY !== '') headers['Authorization'] = `Bearer ${API_KEY}`;
  return headers;
}

// Backoff between attempts of one payment: 250 ms doubling up to 4 s, as the Go generator.
const FIRST_BACKOFF_S = 0.25;
const MAX_BACKOFF_S = 4;

const accepted = new Counter('payments_accepted');
const rejected = new Counter('payments_rejected');
const retries = new Counter('payments_retries');
const acceptLatency = new Trend('payment_accept_latency', true);
const unavailableWithoutRetryAfter = new Counter('payments_503_without_retry_after');
// The step numbers of lifecycleload.go (stepNumbers): with replicas, each step of a plan
// starts on another one.
const STEP_NUMBERS = { c: 1, x: 2, r1: 3, r2: 4 };

const transitionsCommitted = new Counter('transitions_committed');
const transitionsFailed = new Counter('transitions_failed');
const races = new Counter('races');
const racesWithoutOneWinner = new Counter('races_without_one_winner');

/** @type {import('k6/options').Options} */
export const options = {
  scenarios: {
    payments: {
      // shared-iterations: ITERATIONS in total across all VUs (not per VU), so exactly
      // ITERATIONS payments are sent.
      executor: 'shared-iterations',
      vus: VUS,
      iterations: ITERATIONS,
      maxDuration: '10m',
    },
  },
  // setup() may wait for the API to become ready.
  setupTimeout: `${READY_TIMEOUT_S + 10}s`,
  thresholds: {
    checks: ['rate==1.0'],
    payments_accepted: [`count==${ITERATIONS}`],
    payments_rejected: ['count==0'],
    payments_503_without_retry_after: ['count==0'],
    transitions_failed: ['count==0'],
    races_without_one_winner: ['count==0'],
  },
  // Retried 503s are expected while faults are injected; the thresholds above judge the
  // outcome of each payment, not each attempt.
  summaryTrendStats: ['avg', 'min', 'med', 'p(90)', 'p(99)', 'max'],
};

/**
 * Reads a positive integer from the environment.
 * @param {string} name
 * @param {number} fallback
 * @returns {number}
 */
function positiveInt(name, fallback) {
  const raw = __ENV[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n <= 0) {
    throw new Error(`${name}=${raw}: want a positive integer`);
  }
  return n;
}

// setup waits until every replica answers /readyz: in the compose stack the API containers
// have no healthcheck (distroless image), so depends_on only guarantees that they started.
export function setup() {
  const deadline = Date.now() + READY_TIMEOUT_S * 1000;
  for (const baseURL of BASE_URLS) {
    for (;;) {
      const res = http.get(`${baseURL}/readyz`, { timeout: '2s', tags: { name: 'GET /readyz' } });
      if (res.status === 200) break;
      if (Date.now() > deadline) {
        fail(`API at ${baseURL} not ready after ${READY_TIMEOUT_S}s (last status ${res.status})`);
      }
      sleep(1);
    }
  }
}

/**
 * The base URL of request i: the replicas in turn, as a round-robin load balancer.
 * @param {number} i
 * @returns {string}
 */
function replica(i) {
  return BASE_URLS[i % BASE_URLS.length];
}

/**
 * Whether payment n is one of the largest (LARGEST_EVERY).
 * @param {number} n
 * @returns {boolean}
 */
function largest(n) {
  return LARGEST_EVERY > 0 && (n + 1) % LARGEST_EVERY === 0;
}

/**
 * Payment n's user: one of 20, or for each largest payment a user of its own with the
 * longest id the API accepts, random after the prefix so that it does not compress.
 * @param {number} n
 * @returns {string}
 */
function userID(n) {
  if (largest(n)) {
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
    let id = LARGEST_USER_ID_PREFIX;
    while (id.length < 64) id += alphabet[Math.floor(Math.random() * alphabet.length)];
    return id;
  }
  return `chaos-user-${n % 20}`;
}

/**
 * Payment n's amount as JSON digits: 1000 + n, or for each largest payment 19 random
 * digits, the most an int64 holds.
 * @param {number} n
 * @returns {string}
 */
function amount(n) {
  if (!largest(n)) return String(1000 + n);
  let digits = '1';
  while (digits.length < 19) digits += Math.floor(Math.random() * 10);
  return digits;
}

/**
 * Counts a 503 that does not say when to come back.
 * @param {import('k6/http').RefinedResponse<any>} res
 */
function countRetryAfter(res) {
  if (res.status === 503 && !res.headers['Retry-After']) unavailableWithoutRetryAfter.add(1);
}

export default function () {
  const n = exec.scenario.iterationInTest;
  const key = `${RUN_ID}-${n}`;
  // Written by hand, not with JSON.stringify: a 19-digit amount is beyond what a
  // JavaScript number holds exactly.
  const body = `{"user_id":${JSON.stringify(userID(n))},"amount":${amount(n)},"currency":"EUR"}`;
  const params = {
    headers: withKey({ 'Content-Type': 'application/json', 'Idempotency-Key': key }),
    tags: { name: 'POST /payments' },
    timeout: '10s',
  };

  const started = Date.now();
  let backoff = FIRST_BACKOFF_S;
  let res = http.post(`${replica(n)}/payments`, body, params);
  let attempt = 1;
  // Retry what may succeed later with the same key: the database restarting (503 and other
  // 5xx), another request with this key in flight (409), throttling (429), and transport
  // errors (status 0), where the outcome is unknown. Any other answer is final.
  countRetryAfter(res);
  while (retryable(res.status) && attempt < MAX_ATTEMPTS) {
    sleep(backoff);
    backoff = Math.min(2 * backoff, MAX_BACKOFF_S);
    res = http.post(`${replica(n + attempt)}/payments`, body, params);
    countRetryAfter(res);
    attempt++;
    retries.add(1);
  }

  const ok = check(res, {
    'payment accepted (201)': (r) => r.status === 201,
    'response has the payment id': (r) => r.status === 201 && typeof r.json('id') === 'string',
  });
  if (ok) {
    accepted.add(1);
    acceptLatency.add(Date.now() - started);
    if (LIFECYCLE) lifecycle(n, key, String(res.json('id')));
  } else {
    rejected.add(1);
    console.warn(`payment ${key} not accepted after ${attempt} attempts: status ${res.status} ${res.body}`);
  }
}

/**
 * Sends payment n on through its lifecycle plan, as internal/chaos/load/lifecycleload.go does.
 * @param {number} n
 * @param {string} key the payment's Idempotency-Key, the prefix of its transitions'
 * @param {string} id the payment id
 */
function lifecycle(n, key, id) {
  /** @type {(action: string, body: string, step: string) => Step} */
  const step = (action, body, name) => ({ id, action, body, key: `${key}-${name}`, first: n + STEP_NUMBERS[name] });
  // The largest payments (the poison scenario's) are captured and refunded in full: that
  // refund is the largest event the API can write, and the payment's last.
  if (largest(n)) {
    if (transition(step('capture', '', 'c')) === 200) transition(step('refund', '', 'r1'));
    return;
  }
  const amount = 1000 + n;
  const refund60 = JSON.stringify({ amount: Math.floor((amount * 6) / 10) });
  switch (n % 5) {
    case 0:
      if (transition(step('capture', '', 'c')) === 200 && transition(step('refund', '{"amount": 300}', 'r1')) === 200) {
        transition(step('refund', '', 'r2'));
      }
      break;
    case 1:
      transition(step('capture', '', 'c'));
      break;
    case 2:
      transition(step('cancel', '', 'x'));
      break;
    case 3:
      race([step('capture', '', 'c'), step('cancel', '', 'x')]);
      break;
    default:
      if (transition(step('capture', '', 'c')) === 200) {
        race([step('refund', refund60, 'r1'), step('refund', refund60, 'r2')]);
      }
  }
}

/**
 * One transition of a plan.
 * @typedef {object} Step
 * @property {string} id the payment id
 * @property {string} action capture, refund or cancel
 * @property {string} body empty for none
 * @property {string} key its own Idempotency-Key
 * @property {number} first the replica of its first attempt (replica())
 */

/**
 * Builds attempt a of a step, on replica first+a.
 * @param {Step} s
 * @param {number} a
 */
function transitionRequest(s, a) {
  /** @type {Record<string, string>} */
  const headers = withKey({ 'Idempotency-Key': s.key });
  if (s.body !== '') headers['Content-Type'] = 'application/json';
  return {
    method: 'POST',
    url: `${replica(s.first + a)}/payments/${s.id}/${s.action}`,
    body: s.body === '' ? null : s.body,
    params: { headers, tags: { name: `POST /payments/{id}/${s.action}` }, timeout: '10s', responseCallback: http.expectedStatuses(200, 409) },
  };
}

/**
 * Whether a transition's answer may change if it is sent again with its key: a lost
 * answer (0), the database restarting or slow (5xx), throttling (429). 409 and the other
 * 4xx are final.
 * @param {number} status
 * @returns {boolean}
 */
function transitionRetryable(status) {
  return status === 0 || status >= 500 || status === 429;
}

/**
 * Sends one transition, retried with its key like a creation, and returns its final status.
 * @param {Step} s
 * @returns {number}
 */
function transition(s) {
  return send([s])[0];
}

/**
 * Sends two transitions at once; exactly one must win and the other get 409. Each is
 * retried on its own like a single transition, as the Go generator's two goroutines do.
 * @param {Step[]} pair
 */
function race(pair) {
  const statuses = send(pair);
  races.add(1);
  const won = statuses.filter((s) => s === 200).length;
  const lost = statuses.filter((s) => s === 409).length;
  if (won !== 1 || lost !== 1) {
    racesWithoutOneWinner.add(1);
    console.warn(`race on payment ${pair[0].id}: statuses ${statuses.join(', ')}, want one 200 and one 409`);
  }
}

/**
 * Sends the steps at once (http.batch), then again those whose answer was retryable,
 * after a backoff that doubles as a creation's, until each has a final answer or
 * MAX_ATTEMPTS; counts and returns the final statuses.
 * @param {Step[]} steps
 * @returns {number[]}
 */
function send(steps) {
  /** @type {number[]} */
  const statuses = steps.map(() => 0);
  let pending = steps.map((_, i) => i);
  let backoff = FIRST_BACKOFF_S;
  for (let attempt = 0; pending.length > 0 && attempt < MAX_ATTEMPTS; attempt++) {
    if (attempt > 0) {
      sleep(backoff);
      backoff = Math.min(2 * backoff, MAX_BACKOFF_S);
    }
    const reqs = pending.map((i) => transitionRequest(steps[i], attempt));
    const responses = http.batch(reqs.map((r) => ({ method: 'POST', url: r.url, body: r.body, params: r.params })));
    responses.forEach((r, j) => {
      statuses[pending[j]] = r.status;
    });
    pending = pending.filter((i) => transitionRetryable(statuses[i]));
  }
  statuses.forEach((status, i) => count(steps[i].action, status));
  return statuses;
}

/**
 * @param {string} action
 * @param {number} status
 */
function count(action, status) {
  if (status === 200) {
    transitionsCommitted.add(1);
  } else if (status !== 409) {
    transitionsFailed.add(1);
    console.warn(`${action}: status ${status}`);
  }
}

/**
 * @param {number} status
 * @returns {boolean}
 */
function retryable(status) {
  return status === 0 || status >= 500 || status === 409 || status === 429;
}

/**
 * Writes the whole k6 summary as JSON to RESULTS_DIR for make chaos to read, and a short
 * verdict to stdout. No remote jslib (textSummary): the run must work offline.
 * @param {Record<string, any>} data
 */
export function handleSummary(data) {
  const count = (/** @type {string} */ name) => data.metrics[name]?.values?.count ?? 0;
  const failedThresholds = Object.entries(data.metrics)
    .filter(([, m]) => m.thresholds && Object.values(m.thresholds).some((t) => !t.ok))
    .map(([name]) => name);
  const lines = [
    `run ${RUN_ID}: ${count('payments_accepted')} of ${ITERATIONS} payments accepted, ` +
      `${count('payments_rejected')} rejected, ${count('payments_retries')} retries; ` +
      `${count('transitions_committed')} transitions committed, ${count('transitions_failed')} failed, ` +
      `${count('races_without_one_winner')} of ${count('races')} races without exactly one winner`,
    failedThresholds.length === 0 ? 'thresholds: all passed' : `thresholds FAILED: ${failedThresholds.join(', ')}`,
    '',
  ];
  return {
    [`${RESULTS_DIR}/k6-summary.json`]: JSON.stringify(data, null, 2),
    stdout: lines.join('\n'),
  };
}
