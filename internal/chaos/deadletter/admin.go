package deadletter

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"time"
)

// An Admin is the operator at the relay's DLQ: the token that opens our API's /admin/
// endpoints (ADMIN_TOKEN), with which it replays dead letters as an operator does
// once their cause is fixed.
type Admin struct {
	token string
}

// NewAdmin mints a token of 52 characters: ADMIN_TOKEN needs 32 bytes or more.
func NewAdmin() Admin { return Admin{token: rand.Text() + rand.Text()} }

// Env is the API's setting that makes the admin endpoints exist with the token.
func (a Admin) Env() []string { return []string{"ADMIN_TOKEN=" + a.token} }

// Replay sends one dead letter back for delivery through POST
// /admin/dlq/{event_id}/replay of the API process whose admin listener is at
// adminBase (stack.Process.MetricsBase). Only a 200 is a replay.
func (a Admin) Replay(ctx context.Context, adminBase, eventID string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, adminBase+"/admin/dlq/"+eventID+"/replay", nil)
	if err != nil {
		return fmt.Errorf("replay %s: %w", eventID, err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("replay %s: %w", eventID, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("replay %s: status %d", eventID, resp.StatusCode)
	}
	return nil
}
