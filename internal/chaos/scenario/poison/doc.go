// Package poison holds the poison scenario: the topic's size limit is brought below the
// largest valid events, so the broker refuses them for good; they must reach the
// relay's DLQ after a bounded number of rejections, each with an alert at the
// harness's webhook, while every other event flows; then the limit is restored and the
// harness replays each dead letter through the API's admin endpoint.
//
// Start with scenarios.go, which makes the Scenario, then poison.go: the limit, the
// webhook that receives the alerts (package deadletter), the replay, and the rows.
// poisoncalibration.go measures, with a calibration load before the fault, where the
// limit must go: between the largest record that must flow and the smallest poison.
package poison
