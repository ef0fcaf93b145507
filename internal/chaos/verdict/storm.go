package verdict

import "github.com/dscourse/payments-outbox/internal/chaos/load"

// StormReport is what the report keeps of the idempotency storm: the clients' answers,
// the kills, and the outcome per key.
type StormReport struct {
	Answers load.StormAnswers `json:"answers"`
	// Kills lists, per kill of the API, the attempts in flight at it.
	Kills   []int64      `json:"kills"`
	Outcome StormOutcome `json:"outcome"`
}

// StormOutcome is the storm's keys judged against the payments table and the topic.
type StormOutcome struct {
	// Keys counts the keys sent, CreationKeys those of creations.
	Keys         int `json:"keys"`
	CreationKeys int `json:"creation_keys"`
	// NotOne counts the keys without exactly one payment (a creation) or transition in
	// the database; NoOneEvent those without exactly one event in the topic. A key no
	// client got answered may have made nothing, never two.
	NotOne       int    `json:"not_one"`
	FirstNotOne  string `json:"first_not_one,omitempty"`
	NotOneEvent  int    `json:"not_one_event"`
	FirstNoEvent string `json:"first_not_one_event,omitempty"`
	// TransitionsOff: the payments table has no version column, so the transitions'
	// count in the database is not checked (their events still are).
	TransitionsOff bool `json:"transitions_off,omitempty"`
	// Split counts the keys whose successful answers named more than one id.
	Split      int    `json:"split"`
	FirstSplit string `json:"first_split,omitempty"`
}
