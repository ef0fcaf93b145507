package webhooksig

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// The signature of the Standard Webhooks reference libraries' signing test (secret,
// message id, timestamp, body and expected signature as published there).
func TestSignMatchesTheSpecificationsTestVector(t *testing.T) {
	t.Parallel()
	secret, err := ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatalf("ParseSecret: %v", err)
	}

	got := secret.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))

	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
}

// A secret that would not work, or would be weak, is refused at start-up, with how to
// make a good one, and without quoting it.
func TestParseSecretRefusesBadSecrets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, secret, want string
	}{
		{"empty", "", `start with "whsec_"`},
		{"no prefix", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", `start with "whsec_"`},
		{"not base64", "whsec_MfKQ9r8GKYqrTwjUPD8I!PZIo2LaLaSw", "not standard base64"},
		{"key of 23 bytes", "whsec_" + strings.Repeat("QUFB", 7) + "QUE=", "23 bytes, want 24 to 64"},
		{"key of 65 bytes", "whsec_" + strings.Repeat("QUFB", 21) + "QUE=", "65 bytes, want 24 to 64"},
	}
	for _, tt := range tests {
		_, err := ParseSecret(tt.secret)
		if err == nil {
			t.Errorf("%s: ParseSecret succeeded, want an error", tt.name)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %q does not contain %q", tt.name, err, tt.want)
		}
		if encoded := strings.TrimPrefix(tt.secret, "whsec_"); encoded != "" && strings.Contains(err.Error(), encoded) {
			t.Errorf("%s: error %q quotes the secret", tt.name, err)
		}
	}
	for _, ok := range []string{"whsec_" + strings.Repeat("QUFB", 8), "whsec_" + strings.Repeat("QUFB", 21) + "QQ=="} {
		if _, err := ParseSecret(ok); err != nil {
			t.Errorf("ParseSecret of a %d-character secret: %v, want it accepted", len(ok), err)
		}
	}
}

// However a secret is printed or logged, its key does not show.
func TestSecretNeverPrintsItsKey(t *testing.T) {
	t.Parallel()
	const encoded = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secret, err := ParseSecret("whsec_" + encoded)
	if err != nil {
		t.Fatalf("ParseSecret: %v", err)
	}
	holder := struct{ Secret Secret }{secret}
	var logged strings.Builder
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", slog.Any("secret", secret), slog.Any("holder", holder))
	printed := []string{fmt.Sprint(secret), fmt.Sprintf("%v %+v %#v %s", holder, holder, holder, secret), logged.String()}
	for _, out := range printed {
		if strings.Contains(out, encoded) || strings.Contains(out, string(secret.key)) || strings.Contains(out, fmt.Sprint(secret.key)) {
			t.Errorf("printed secret shows its key: %s", out)
		}
	}
}
