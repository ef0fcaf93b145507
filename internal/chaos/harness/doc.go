// Package harness runs one chaos scenario from start to verdict: what every scenario
// shares, whatever it breaks.
//
// Start with scenario.go: a Scenario says what a run breaks (Disrupt), when (LoadDelay,
// Span) and how to tell that it bit (Validity). Then runner.go: RunScenario creates
// fresh databases and a topic, starts the services (run.go, services.go: ours, a
// student's ServiceCommands, or a Target somebody else runs), warms them up, sends the
// load while Disrupt runs, waits for the drain, and judges. A Run is what Disrupt and
// Validity get: the services to kill and restart, the Toxiproxy proxy, the databases
// and topic, and Disrupted, which records each disruption for the report.
//
// What the verdict is made of:
//   - evidence.go gathers what the harness saw for itself (events held back by each
//     fault window, copies injected, PostgreSQL's own start time) and holds the
//     validity rows the scenarios share (FaultChecks, ProbeCheck, InjectedCheck);
//   - observed.go, totals.go and order.go turn what the verifier read into counts, and
//     check each payment's events against their sequence;
//   - checks.go, loadrows.go and consumerdlq.go are the SLO and contract rows every
//     scenario gets after its own;
//   - sampler.go samples the run every few hundred milliseconds into the timeline the
//     HTML report draws; the verdict never reads it.
//
// The scenarios themselves live in the packages under internal/chaos/scenario, which
// depend on this one; package chaos lists them.
package harness
