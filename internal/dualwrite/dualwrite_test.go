package dualwrite_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/dscourse/payments-outbox/internal/dualwrite"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// The teaching handler must really lose the event when Kafka is down, and really
// publish it when Kafka is up: otherwise the dual-write scenario teaches nothing.
func TestDualWrite(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		kafkaDown  bool
		wantEvents int
	}{
		{name: "kafka up: payment and event", kafkaDown: false, wantEvents: 1},
		{name: "kafka down: payment committed, event lost, 201 anyway", kafkaDown: true, wantEvents: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := testenv.NewPool(t, migrations.Payments)
			topic := testenv.NewTopic(t, 3)
			proxy := testenv.NewKafkaProxy(t)
			h, err := dualwrite.NewHandler(dualwrite.Config{
				Brokers: []string{proxy.Addr}, Topic: topic, PublishTimeout: time.Second, ClientOpts: proxy.ClientOpts(),
			}, pool, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("NewHandler: %v", err)
			}
			t.Cleanup(h.Close)
			if tt.kafkaDown {
				if err := proxy.Proxy.Disable(); err != nil {
					t.Fatalf("disable proxy: %v", err)
				}
			}

			req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"user_id":"u-1","amount":1999,"currency":"EUR"}`))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusCreated {
				t.Fatalf("POST /payments: got status %d, want 201; body %s", rec.Code, rec.Body)
			}
			var body struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.ID == "" {
				t.Fatalf("201 body %s: no payment id (%v)", rec.Body, err)
			}

			var committed int
			if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM payments WHERE id = $1`, body.ID).Scan(&committed); err != nil {
				t.Fatalf("count payments: %v", err)
			}
			if committed != 1 {
				t.Errorf("payments committed: got %d, want 1", committed)
			}
			// The handler answered after its publish returned, so whatever was written
			// is below the high watermark that ReadTopic reads up to.
			got, err := verify.ReadTopic(t.Context(), testenv.KafkaBrokers(t), topic)
			if err != nil {
				t.Fatalf("read topic: %v", err)
			}
			want := map[string]int{}
			if tt.wantEvents > 0 {
				want[body.ID] = tt.wantEvents
			}
			if diff := cmp.Diff(want, got.PaymentEvents, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("events per payment in the topic (-want +got):\n%s", diff)
			}
			if got.Records != tt.wantEvents {
				t.Errorf("records in the topic: got %d, want %d", got.Records, tt.wantEvents)
			}
		})
	}
}
