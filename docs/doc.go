// Package docs holds the project's documents and the tests that keep them true:
// openapi_test.go runs the real API and validates its responses against openapi.yaml;
// links_test.go resolves every relative link and anchor of README.md and docs/**/*.md;
// adr_test.go, contract_test.go and rubric_test.go hold the ADRs, the contract and the
// mentor's rubric to their shape (a Status line and a length, one requirements table,
// verdict rows and tests that exist).
package docs
