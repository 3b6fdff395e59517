package client

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseStartPosition(t *testing.T) {
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct{ in, want string }{
		{"earliest", "earliest"},
		{"latest", "latest"},
		{"12:7", "12:7"},
		{"12:7:3", "12:7"},
		{"origin:eu-west:12:7", "origin:eu-west:12:7"},
		{"2026-05-01T09:00:00Z", "2026-05-01T09:00:00Z"},
		{"2026-05-01T11:00:00+02:00", "2026-05-01T09:00:00Z"},
		{"-10m", "2026-05-01T09:50:00Z"},
		{"-1h30m", "2026-05-01T08:30:00Z"},
		{"@1777629600000", "2026-05-01T10:00:00Z"},
	} {
		p, err := ParseStartPosition(tc.in, now)
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if p.String() != tc.want {
			t.Fatalf("%q: got %s, want %s", tc.in, p, tc.want)
		}
		if err := p.validate("x"); err != nil {
			t.Fatalf("%q: parsed position invalid: %v", tc.in, err)
		}
	}
	for _, tc := range []struct{ in, mention string }{
		{"", "want earliest"},
		{"yesterday", "want earliest"},
		{"origin:a:1", "origin:REGION:LEDGER:ENTRY"},
		{"origin::1:2", "origin:REGION:LEDGER:ENTRY"},
		{"origin:a:x:2", "non-negative"},
		{"origin:a:1:-2", "non-negative"},
		{"-5parsecs", "negative Go duration"},
		{"12:-1", "LEDGER:ENTRY"},
		{"@x", "UNIX_MS"},
		{"2026-13-01T00:00:00Z", "want earliest"},
	} {
		_, err := ParseStartPosition(tc.in, now)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.mention) {
			t.Fatalf("%q: error %v, want ErrInvalidArgument mentioning %q", tc.in, err, tc.mention)
		}
	}
	if p := (StartPosition{}); p.String() != "latest" {
		t.Fatalf("zero StartPosition is %s, want latest", p)
	}
}
