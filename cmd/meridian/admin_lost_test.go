package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestCLISkipLost covers `admin topics skip-lost`: bad flags fail with a
// one-line error naming the flag; an entry that reads fine is refused;
// without --yes nothing is skipped, it says what it would skip and exits
// non-zero; with --yes it applies.
func TestCLISkipLost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	topic := "public/default/skip-lost"
	admin := func(args ...string) cliResult {
		t.Helper()
		return runCLI(t, "", append([]string{"admin", "--url", url}, args...)...)
	}
	if r := admin("topics", "create", topic); r.code != 0 {
		t.Fatalf("create topic: %s", r.stderr)
	}
	if r := admin("subscriptions", "create", topic, "s", "--from", "earliest"); r.code != 0 {
		t.Fatalf("create subscription: %s", r.stderr)
	}
	// The 5 messages land in one or two entries (the first goes at once,
	// the rest gather behind it): n below.
	if r := runCLI(t, "", "produce", "--url", url, "--topic", topic, "--count", "5", "--size", "16"); r.code != 0 {
		t.Fatalf("produce: %s", r.stderr)
	}
	// Close the ledger: unload; the next admin call reloads the topic on a new ledger.
	if r := admin("topics", "unload", topic); r.code != 0 {
		t.Fatalf("unload: %s", r.stderr)
	}
	r := admin("topics", "internal-stats", topic, "--output", "json")
	if r.code != 0 {
		t.Fatalf("internal-stats: %s", r.stderr)
	}
	var st struct {
		Ledgers []struct {
			LedgerID int64 `json:"ledgerId"` // JSON numbers (jsonout.go)
			Entries  int64 `json:"entries"`
			Closed   bool  `json:"closed"`
		} `json:"ledgers"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Ledgers) < 2 || !st.Ledgers[0].Closed {
		t.Fatalf("internal-stats: %v %q", err, r.stdout)
	}
	first := fmt.Sprint(st.Ledgers[0].LedgerID)
	n := st.Ledgers[0].Entries

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--entry", "0:0"}, "--subscription"},
		{[]string{"-s", "s"}, "--entry"},
		{[]string{"-s", "s", "--entry", "x"}, "--entry"},
		{[]string{"-s", "s", "--entry", "1:2", "--ledger", "1"}, "not both"},
		{[]string{"-s", "s", "--entry", first + ":0", "--yes"}, "readable"},
	} {
		r := admin(append([]string{"topics", "skip-lost", topic}, c.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("skip-lost %v: exit %d, stderr %q; want a one-line error with %q", c.args, r.code, r.stderr, c.want)
		}
	}
	r = admin("topics", "skip-lost", topic, "-s", "s", "--ledger", first)
	if r.code == 0 || !strings.Contains(r.stdout, fmt.Sprintf("would acknowledge %d ", n)) || !strings.Contains(r.stderr, "--yes") {
		t.Fatalf("skip-lost without --yes: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = admin("topics", "stats", topic, "--output", "json")
	if !strings.Contains(r.stdout, fmt.Sprintf(`"backlogEntries":%d`, n)) {
		t.Fatalf("the dry run changed the backlog: %s", r.stdout)
	}
	r = admin("topics", "skip-lost", topic, "-s", "s", "--ledger", first, "--yes", "--output", "json")
	if r.code != 0 || !strings.Contains(r.stdout, `"applied":true`) || !strings.Contains(r.stdout, fmt.Sprintf(`"entries":%d`, n)) {
		t.Fatalf("skip-lost --yes: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = admin("topics", "stats", topic, "--output", "json")
	if !strings.Contains(r.stdout, `"backlogEntries":0`) {
		t.Fatalf("after the skip: %s", r.stdout)
	}
}
