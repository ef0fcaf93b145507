package main

import (
	"strings"
	"testing"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/google/go-cmp/cmp"
)

func TestServiceCommandsFromFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                string
		apiCmd, consumerCmd string
		set                 []string
		want                *harness.ServiceCommands
		wantErr             string
	}{
		{name: "neither: our binaries or -api-url", set: []string{"api-url"}},
		{
			name: "both", apiCmd: "./api migrate && exec ./api", consumerCmd: "./consumer",
			set:  []string{"api-cmd", "consumer-cmd", "scenario"},
			want: &harness.ServiceCommands{API: "./api migrate && exec ./api", Consumer: "./consumer"},
		},
		{name: "api only", apiCmd: "./api", set: []string{"api-cmd"}, wantErr: "-consumer-cmd is empty"},
		{name: "with -api-url", apiCmd: "./api", consumerCmd: "./c", set: []string{"api-cmd", "consumer-cmd", "api-url"}, wantErr: "-api-url cannot go with -api-cmd"},
		{name: "with -payments-db", apiCmd: "./api", consumerCmd: "./c", set: []string{"payments-db"}, wantErr: "-payments-db cannot go with -api-cmd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := serviceCommands(tt.apiCmd, tt.consumerCmd, tt.set)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("serviceCommands: got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("serviceCommands: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("serviceCommands (-want +got):\n%s", diff)
			}
		})
	}
}
