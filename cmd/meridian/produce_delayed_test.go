package main

import (
	"strings"
	"testing"
	"time"
)

// TestCLIProduceDeliverAfter: produce --deliver-after holds the messages
// back (a consumer gets them no earlier), --deliver-at takes RFC 3339 or
// Unix ms, and bad values get a one-line error naming the flag.
func TestCLIProduceDeliverAfter(t *testing.T) {
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--deliver-after", "-5s"}, "--deliver-after"},
		{[]string{"--deliver-after", "soon"}, "--deliver-after"},
		{[]string{"--deliver-at", "tomorrow"}, "--deliver-at"},
		{[]string{"--deliver-at", "-3"}, "--deliver-at"},
		{[]string{"--deliver-after", "1s", "--deliver-at", "2026-12-01T10:00:00Z"}, "mutually exclusive"},
	} {
		args := append([]string{"produce", "--url", "127.0.0.1:1", "--topic", "public/default/x", "--message", "m"}, bad.args...)
		r := runCLI(t, "", args...)
		if r.code == 0 || !strings.Contains(r.stderr, bad.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 1 {
			t.Errorf("%v: exit %d, stderr %q (want an error naming %s)", bad.args, r.code, r.stderr, bad.want)
		}
	}
	url := cliStandalone(t)
	const topic = "public/default/cli-delayed"
	start := time.Now()
	r := runCLI(t, "", "produce", "--url", url, "--topic", topic, "--count", "4", "--keys", "2", "--deliver-after", "3s", "--output", "json")
	if r.code != 0 || len(jsonLines(t, r.stdout)) != 4 {
		t.Fatalf("produce: exit %d, out %q, err %q", r.code, r.stdout, r.stderr)
	}
	at := time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339Nano)
	r = runCLI(t, "", "produce", "--url", url, "--topic", topic, "--count", "1", "--deliver-at", at, "--output", "json")
	if r.code != 0 {
		t.Fatalf("produce --deliver-at: exit %d, err %q", r.code, r.stderr)
	}
	r = runCLI(t, "", "consume", "--url", url, "--topic", topic, "--subscription", "s", "--type", "key_shared", "--from", "earliest", "--count", "5", "--output", "json")
	if r.code != 0 || len(jsonLines(t, r.stdout)) != 5 {
		t.Fatalf("consume: exit %d, out %q, err %q", r.code, r.stdout, r.stderr)
	}
	if d := time.Since(start); d < 3*time.Second {
		t.Fatalf("consumed the delayed messages %v after producing them, before --deliver-after 3s", d)
	}
}
