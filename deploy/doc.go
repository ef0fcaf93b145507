// Package deploy holds the Docker Compose stack (docker-compose.yml, toxiproxy.json, the
// Prometheus configuration and alert rules, a small Grafana dashboard) and the tests
// that keep it wired like the native stack of scripts/stack and the contract in
// docs/contract.md.
//
// Docker is not needed to run the tests: they load the compose file with the compose
// specification's own Go loader and compare it with the native stack's files.
package deploy
