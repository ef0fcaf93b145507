package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// createAPIKey makes a key for our API with its own command, "api keys create", on the
// run's payments database, before the API starts: the way an operator makes one.
func createAPIKey(ctx context.Context, apiBinary, paymentsDB string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, apiBinary, "keys", "create", "--merchant", "chaos")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+paymentsDB)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("api keys create: %w", err)
	}
	return parseAPIKey(out)
}

// parseAPIKey reads the api_key of what "api keys create" printed.
func parseAPIKey(out []byte) (string, error) {
	var created struct {
		Key string `json:"api_key"`
	}
	if err := json.Unmarshal(out, &created); err != nil || created.Key == "" {
		return "", fmt.Errorf("api keys create printed no api_key (%v)", err)
	}
	return created.Key, nil
}
