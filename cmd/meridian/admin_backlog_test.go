package main

import (
	"strings"
	"testing"
)

// TestCLIBacklogCommands covers `admin topics skip|clear-backlog|
// expire-messages|expire-messages-all-subscriptions|stats-internal`: bad
// flags fail with a one-line error naming the flag and change nothing;
// each command moves the cursor and prints, with --output json, 64-bit
// values as JSON numbers (as `topics stats` and `stats-internal` do).
func TestCLIBacklogCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	topic := "public/default/backlog-cli"
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
	// Pulsar's spelling.
	if r := admin("topics", "create-subscription", topic, "-s", "other", "-m", "earliest"); r.code != 0 {
		t.Fatalf("create-subscription: %s", r.stderr)
	}
	if r := admin("topics", "subscriptions", topic, "--output", "json"); r.code != 0 || !strings.Contains(r.stdout, `"subscriptions":["other","s"]`) {
		t.Fatalf("topics subscriptions: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	// One message per entry.
	if r := runCLI(t, "", "produce", "--url", url, "--topic", topic, "--count", "10", "--size", "16", "--batch-max-messages", "1"); r.code != 0 {
		t.Fatalf("produce: %s", r.stderr)
	}
	backlog := func(sub string) float64 {
		t.Helper()
		r := admin("topics", "stats", topic, "--output", "json")
		ls := jsonLines(t, r.stdout)
		if r.code != 0 || len(ls) != 1 {
			t.Fatalf("stats: exit %d %q %s", r.code, r.stdout, r.stderr)
		}
		if _, ok := ls[0]["msgsInTotal"].(float64); !ok {
			t.Fatalf("stats: msgsInTotal is not a JSON number: %s", r.stdout)
		}
		if _, ok := ls[0]["backlogSizeBytes"].(float64); !ok {
			t.Fatalf("stats: backlogSizeBytes is not a JSON number: %s", r.stdout)
		}
		for _, s := range ls[0]["subscriptions"].([]any) {
			m := s.(map[string]any)
			if m["name"] == sub {
				n, ok := m["backlogEntries"].(float64)
				if !ok {
					t.Fatalf("backlogEntries is not a JSON number: %s", r.stdout)
				}
				return n
			}
		}
		t.Fatalf("no subscription %s: %s", sub, r.stdout)
		return 0
	}
	if b := backlog("s"); b != 10 {
		t.Fatalf("backlog %v after 10 messages, want 10 entries", b)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"skip", topic, "-n", "2"}, "--subscription"},
		{[]string{"skip", topic, "-s", "s"}, "--count"},
		{[]string{"skip", topic, "-s", "s", "-n", "0"}, "--count"},
		{[]string{"skip", topic, "-s", "s", "--all-subscriptions", "-n", "1"}, "not both"},
		{[]string{"clear-backlog", topic}, "--subscription"},
		{[]string{"expire-messages", topic, "-s", "s"}, "expire-time"},
		{[]string{"expire-messages", topic, "-s", "s", "-t", "soon"}, "--expire-time"},
		{[]string{"expire-messages-all-subscriptions", topic, "-s", "s", "-t", "1h"}, "--subscription"},
		{[]string{"skip", topic, "-s", "nope", "-n", "1"}, "nope"},
	} {
		r := admin(append([]string{"topics"}, c.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want a one-line error with %q", c.args, r.code, r.stderr, c.want)
		}
	}
	if b := backlog("s"); b != 10 {
		t.Fatalf("a refused command changed the backlog: %v", b)
	}

	r := admin("topics", "skip", topic, "-s", "s", "-n", "3", "--output", "json")
	ls := jsonLines(t, r.stdout)
	if r.code != 0 || len(ls) != 1 {
		t.Fatalf("skip: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	res := ls[0]["subscriptions"].([]any)[0].(map[string]any)
	if res["acknowledgedEntries"] != float64(3) || res["backlogEntries"] != float64(7) {
		t.Fatalf("skip json: %s, want acknowledgedEntries 3 and backlogEntries 7 as numbers", r.stdout)
	}
	if _, ok := res["markDeletePosition"].(map[string]any)["ledgerId"].(float64); !ok {
		t.Fatalf("skip json: markDeletePosition.ledgerId is not a number: %s", r.stdout)
	}
	r = admin("topics", "expire-messages", topic, "-s", "s", "-t", "1h")
	if r.code != 0 || !strings.Contains(r.stdout, "expired 0 entries on subscription s") {
		t.Fatalf("expire-messages -t 1h: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	r = admin("topics", "expire-messages-all-subscriptions", topic, "-t", "0s")
	if r.code != 0 || !strings.Contains(r.stdout, "expired 10 entries on subscription other") || !strings.Contains(r.stdout, "expired 7 entries on subscription s") {
		t.Fatalf("expire-messages-all-subscriptions -t 0s: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "produce", "--url", url, "--topic", topic, "--count", "2", "--size", "16", "--batch-max-messages", "1"); r.code != 0 {
		t.Fatalf("produce: %s", r.stderr)
	}
	r = admin("topics", "skip-all", topic, "--all-subscriptions")
	if r.code != 0 || strings.Count(r.stdout, "cleared 2 entries") != 2 {
		t.Fatalf("skip-all (clear-backlog): exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if b := backlog("other"); b != 0 {
		t.Fatalf("backlog after clear-backlog: %v", b)
	}
	r = admin("topics", "stats-internal", topic, "--output", "json")
	ls = jsonLines(t, r.stdout)
	if r.code != 0 || len(ls) != 1 {
		t.Fatalf("stats-internal: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if _, ok := ls[0]["entries"].(float64); !ok || ls[0]["entries"] != float64(12) {
		t.Fatalf("stats-internal: entries %v, want the JSON number 12: %s", ls[0]["entries"], r.stdout)
	}
	if r := admin("topics", "internal-stats", topic); r.code != 0 {
		t.Fatalf("the old name internal-stats: exit %d %s", r.code, r.stderr)
	}
	if r := admin("topics", "unsubscribe", topic); r.code == 0 || !strings.Contains(r.stderr, "--subscription") {
		t.Fatalf("unsubscribe without -s: exit %d %s", r.code, r.stderr)
	}
	if r := admin("topics", "unsubscribe", topic, "-s", "other"); r.code != 0 {
		t.Fatalf("unsubscribe: exit %d %s", r.code, r.stderr)
	}
	if r := admin("topics", "subscriptions", topic); r.code != 0 || strings.TrimSpace(r.stdout) != "s" {
		t.Fatalf("subscriptions after unsubscribe: %q %s", r.stdout, r.stderr)
	}
}
