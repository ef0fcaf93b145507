package chaos

import (
	"fmt"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// check builds a Check; it keeps the call sites one line each.
func check(kind verdict.CheckKind, name, want string, got any, ok bool) verdict.Check {
	return verdict.Check{Kind: kind, Name: name, Want: want, Got: fmt.Sprint(got), OK: ok}
}

// checkOff builds a Check that is off, and says why in Got.
func checkOff(kind verdict.CheckKind, name, want, why string) verdict.Check {
	return verdict.Check{Kind: kind, Name: name, Want: want, Got: "off: " + why, OK: true, Off: true}
}
