// Package docs holds the project's documents and the tests that keep the machine-readable
// ones true: openapi_test.go runs the real API and validates its responses against
// openapi.yaml.
package docs
