package main

import (
	"strings"
	"testing"
)

// TestCLIReplicatedSubscriptions: `consume --replicated`, `admin
// subscriptions create --replicated` and `namespaces set-policies
// --replicate-subscriptions` make replicated subscriptions (the topic stats
// say so); without them a subscription is not replicated.
func TestCLIReplicatedSubscriptions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	ok := func(args ...string) cliResult {
		t.Helper()
		r := runCLI(t, "", args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		return r
	}
	// Retain everything: the subscriptions are created after the messages.
	ok("admin", "--url", url, "namespaces", "create", "public/rs")
	ok("admin", "--url", url, "namespaces", "set-policies", "public/rs", "--retention-time", "-1s", "--retention-size", "-1")
	topic := "public/rs/t"
	ok("produce", "--url", url, "--topic", topic, "--count", "3", "--size", "8")
	ok("consume", "--url", url, "--topic", topic, "--subscription", "c1", "--from", "earliest", "--count", "3", "--replicated")
	ok("admin", "--url", url, "subscriptions", "create", topic, "s1", "--from", "earliest", "--replicated")
	ok("admin", "--url", url, "subscriptions", "create", topic, "plain", "--from", "earliest")
	replicated := func(sub string) bool {
		t.Helper()
		r := ok("admin", "--url", url, "topics", "stats", topic, "--output", "json")
		st := jsonLines(t, r.stdout)
		if len(st) != 1 {
			t.Fatalf("stats: %q", r.stdout)
		}
		subs, _ := st[0]["subscriptions"].([]any)
		for _, x := range subs {
			m, _ := x.(map[string]any)
			if m["name"] == sub {
				return m["replicated"] == true
			}
		}
		t.Fatalf("subscription %s not in stats %q", sub, r.stdout)
		return false
	}
	if !replicated("c1") || !replicated("s1") || replicated("plain") {
		t.Fatalf("replicated: c1 %v, s1 %v, plain %v; want true, true, false", replicated("c1"), replicated("s1"), replicated("plain"))
	}
	if r := ok("admin", "--url", url, "topics", "stats", topic); !strings.Contains(r.stdout, "ack replication") || !strings.Contains(r.stdout, "s1") {
		t.Fatalf("text stats without the ack replication of the replicated subscriptions: %q", r.stdout)
	}
	ok("admin", "--url", url, "namespaces", "set-policies", "public/rs", "--replicate-subscriptions")
	r := ok("admin", "--url", url, "namespaces", "policies", "public/rs", "--output", "json")
	if !strings.Contains(r.stdout, `"replicateSubscriptions":true`) {
		t.Fatalf("policies: %q", r.stdout)
	}
	ok("admin", "--url", url, "subscriptions", "create", topic, "bypolicy")
	if !replicated("bypolicy") {
		t.Fatal("a subscription created under replicate_subscriptions is not replicated")
	}
}
