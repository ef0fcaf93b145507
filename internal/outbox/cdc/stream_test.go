package cdc

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// The fast parse of a timestamptz from the stream reads what pgtype reads, and falls
// back to pgtype for the forms it does not know.
func TestTimestamptzReadsWhatPgtypeReads(t *testing.T) {
	t.Parallel()
	c := &replicationConn{types: pgtype.NewMap()}
	for _, text := range []string{
		"2026-12-06 17:40:10.123456+00",
		"2026-12-06 17:40:10.12+00",
		"2026-12-06 17:40:10+00",
		"2026-12-06 19:40:10.5+02",
		"2026-12-06 17:40:10.123456+05:30",
		"infinity",
	} {
		got, gotErr := c.timestamptz([]byte(text))
		var want time.Time
		wantErr := c.types.Scan(pgtype.TimestamptzOID, pgtype.TextFormatCode, []byte(text), &want)
		if (gotErr != nil) != (wantErr != nil) || !got.Equal(want) {
			t.Errorf("timestamptz(%q) = %v, %v; pgtype reads %v, %v", text, got, gotErr, want, wantErr)
		}
	}
	if _, err := c.timestamptz([]byte("not a time")); err == nil {
		t.Error(`timestamptz("not a time") returned no error`)
	}
}
