// Package load is the harness's load generator, the Go twin of loadtest/k6/payments.js:
// it sends payments to the API, each with its own Idempotency-Key and retried with it,
// and takes some on through their lifecycle, and reports what the clients saw.
//
// Start with loadgen.go: Config says what to send and Run sends it, returning a Result
// (the ids the API accepted, when, and the latencies). The rest is what Run does on the
// way:
//
//   - lifecycleload.go captures, refunds and cancels accepted payments, races two
//     transitions of one payment, and records every event the API committed;
//   - samekey.go sends some requests from several clients at once with one key, and
//     counts the keys whose answers named more than one payment;
//   - storm.go is the idempotency storm's load (Storm): every key sent by several
//     clients at once, each attempt cut short by its client and retried with the key,
//     and every answer counted by what the contract allows;
//   - answers.go counts every 5xx answer of every attempt, through the HTTP client's
//     transport;
//   - apiclient.go is the HTTP client of every request, with the API key.
package load
