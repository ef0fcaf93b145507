package harness

import (
	"math/rand/v2"
	"time"
)

// Between draws a duration uniformly from [r[0], r[1]).
func Between(r [2]time.Duration) time.Duration {
	if r[1] <= r[0] {
		return r[0]
	}
	return r[0] + rand.N(r[1]-r[0])
}
