// Package compose runs the harness's scenarios against the services of
// deploy/docker-compose.yml (STACK=compose), judged from the host in the black-box mode
// of -api-url: as a service the harness did not start.
//
// Start with compose.go: Run takes a Stack (the file, where the host reaches it, and
// what brings its services up and down) and runs each scenario the black-box mode can
// run on a stack of its own. composefile.go reads from the file what the harness needs
// (the databases, the topic, the Toxiproxy proxy the faults use), and composeview.go
// maps the file's addresses to those the host reaches.
package compose
