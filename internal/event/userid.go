package event

import (
	"fmt"
	"unicode/utf8"
)

// MaxUserIDLength bounds a user id: the CHECK constraint on payments.user_id, and what
// fits in the consumer's decisions_user_occurred_idx.
const MaxUserIDLength = 64

// ValidateUserID is the one rule for a user id, which the payments API enforces on every
// request and the consumer on every record: 1 to 64 visible ASCII characters (0x21 to
// 0x7E), letters, digits and punctuation, no spaces, no control characters, nothing
// outside ASCII.
//
// A user id is the caller's identifier for a user, not a name to display, and the
// antifraud consumer counts a user's payments by comparing it byte for byte. Anything
// invisible or look-alike would let two ids that read the same count as two users (or
// let one user spread payments over "u-42", "u-42 " and "u\u00a042" to stay under the
// velocity rule): spaces, blank ids, non-breaking and zero-width spaces, Cyrillic
// letters that look Latin, and a NUL, which a text column refuses. Trimming would be
// worse than refusing, since it would store an id the caller never sent. The rule is
// also one that every regular expression engine reads the same way, so
// docs/openapi.yaml states it exactly as its pattern and the fuzzer (make
// check-openapi) can hold the server to it; "printable Unicode" differs between Unicode
// versions and has no portable pattern.
func ValidateUserID(id string) error {
	if n := utf8.RuneCountInString(id); n == 0 || n > MaxUserIDLength {
		return fmt.Errorf("must be 1 to %d characters, got %d", MaxUserIDLength, n)
	}
	for i, r := range id {
		if r < 0x21 || r > 0x7e {
			return fmt.Errorf("must be visible ASCII characters (letters, digits, punctuation) without spaces, found %U at byte %d", r, i)
		}
	}
	return nil
}
