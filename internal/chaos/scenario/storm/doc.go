// Package storm holds the idempotency-storm scenario: every Idempotency-Key is sent by
// several clients at once, with client timeouts shorter than the API's own budget and
// retries with the same key, while the API is SIGKILLed with keyed requests in flight
// and restarted. Each key must make one payment (one transition) and one event, and
// every answer of a key must agree.
//
// Start with scenarios.go, which makes the Scenario; storm.go sends the storm
// (load.Storm) and kills the API; stormcheck.go reads what each key made, from the
// payments table and the topic, and judges it.
package storm
