// Package pgfailover is the pg-failover scenario: the primary PostgreSQL server lost
// under load, its synchronous standby promoted, the old primary rebuilt as the new
// one's standby, and a fail-back to it. The outbox's promise, an event is safe once its
// payment's COMMIT returns, must then hold across servers: every payment answered 201
// is on the timeline that survives, with its event and its decision, and the services
// follow the primary by their multi-host URLs without a restart
// (docs/adr/0008-postgres-failover.md).
//
// Start with scenarios.go, which makes the Scenario and runs the steps; pair.go is the
// pair of servers the run starts for itself (the shared server must never be killed or
// promoted), watch.go probes both servers for what they say they are, windows.go turns
// the probes and the clients' attempts into the windows without a primary, and rows.go
// is the verdict's rows.
package pgfailover
