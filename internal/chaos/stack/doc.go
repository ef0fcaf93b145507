// Package stack starts what the harness runs on: the servers of scripts/stack (the
// native stack, and the three-node Kafka cluster when a scenario needs it) and the
// services under test as real processes.
//
// Start with stack.go: Choose picks the native or the compose stack from STACK, Native
// starts the native stack's servers and stops exactly those it started, Build builds
// the binaries, and LockRuns keeps two chaos runs on one machine from breaking each
// other's network. process.go is one service as a process group that the scenarios
// start, kill, freeze, thaw and stop; cluster.go starts and stops the cluster.
package stack
