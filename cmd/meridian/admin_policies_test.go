package main

import (
	"strings"
	"testing"
)

// TestCLIPolicies: the Pulsar-shaped set-/get-/remove- policy commands at
// the namespace, prefix and topic levels, get --applied and
// get-effective-policies resolving them, topics list --prefix, and bad
// values refused with one line naming the flag, changing nothing.
func TestCLIPolicies(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	ok := func(args ...string) cliResult {
		t.Helper()
		r := runCLI(t, "", append([]string{"admin", "--url", url}, args...)...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		return r
	}
	refused := func(mention string, args ...string) {
		t.Helper()
		r := runCLI(t, "", append([]string{"admin", "--url", url}, args...)...)
		if r.code == 0 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, mention) {
			t.Fatalf("%v: exit %d, stderr %q; want a one-line error naming %q", args, r.code, r.stderr, mention)
		}
	}
	one := func(r cliResult) map[string]any {
		t.Helper()
		ls := jsonLines(t, r.stdout)
		if len(ls) != 1 {
			t.Fatalf("want one JSON line: %q", r.stdout)
		}
		return ls[0]
	}
	pol := func(r cliResult) map[string]any {
		t.Helper()
		return one(r)["policies"].(map[string]any)
	}
	ok("namespaces", "create", "public/pol")
	ok("topics", "create", "public/pol/video/uploaded/v1")
	ok("topics", "create", "public/pol/audio/a1")

	ok("namespaces", "set-retention", "--size", "100G", "--time", "7d", "public/pol")
	if p := pol(ok("namespaces", "get-retention", "public/pol", "--output", "json")); p["retention_size_bytes"] != float64(100<<30) || p["retention_time_seconds"] != float64(7*86400) {
		t.Fatalf("namespace retention: %v", p)
	}
	ok("namespaces", "set-backlog-quota", "--limit", "10G", "--limit-time", "1h", "--policy", "producer_exception", "public/pol")
	if p := pol(ok("namespaces", "get-backlog-quotas", "public/pol", "--output", "json")); p["backlog_quota_bytes"] != float64(10<<30) ||
		p["backlog_quota_age_seconds"] != float64(3600) || p["backlog_quota_action"] != "QUOTA_ACTION_PRODUCER_ERROR" {
		t.Fatalf("namespace backlog quota: %v", p)
	}
	ok("namespaces", "set-message-ttl", "--ttl", "1h", "public/pol")
	ok("namespaces", "set-deduplication", "--disable", "public/pol")
	ok("namespaces", "set-persistence", "-e", "1", "-w", "1", "-a", "1", "public/pol")
	ok("namespaces", "set-delayed-delivery", "--enable", "public/pol")
	// The namespace's other policies stay as they were.
	if p := pol(ok("namespaces", "get-retention", "public/pol", "--output", "json")); p["retention_size_bytes"] != float64(100<<30) {
		t.Fatalf("retention after the other set-* commands: %v", p)
	}

	// A prefix (trailing '/') and a topic override.
	ok("topics", "set-message-ttl", "--ttl", "30m", "public/pol/video/")
	ok("topics", "set-retention", "--time", "1d", "public/pol/video/uploaded/v1")
	if p := pol(ok("topics", "get-message-ttl", "public/pol/video/", "--output", "json")); p["message_ttl_seconds"] != float64(1800) {
		t.Fatalf("prefix ttl: %v", p)
	}
	if p := pol(ok("topics", "get-retention", "public/pol/video/uploaded/v1", "--output", "json")); p["retention_time_seconds"] != float64(86400) || p["retention_size_bytes"] != nil {
		t.Fatalf("topic override: %v (size must be unset: it inherits)", p)
	}
	r := ok("topics", "get-retention", "public/pol/video/uploaded/v1", "--applied", "--output", "json")
	if o := one(r); o["level"] != "effective" || pol(r)["retention_time_seconds"] != float64(86400) || pol(r)["retention_size_bytes"] != float64(100<<30) {
		t.Fatalf("applied retention: %v", o)
	}
	r = ok("topics", "get-effective-policies", "public/pol/video/uploaded/v1", "--output", "json")
	if src, _ := one(r)["sources"].(map[string]any); src["message_ttl_seconds"] != "prefix:public/pol/video/" || src["retention_time_seconds"] != "topic" {
		t.Fatalf("effective sources: %q", r.stdout)
	}
	if p := pol(ok("topics", "get-message-ttl", "public/pol/audio/a1", "--applied", "--output", "json")); p["message_ttl_seconds"] != float64(3600) {
		t.Fatalf("audio topic ttl (namespace's): %v", p)
	}
	r = ok("namespaces", "list-prefix-policies", "public/pol", "--output", "json")
	if !strings.Contains(r.stdout, `"public/pol/video/"`) {
		t.Fatalf("list-prefix-policies: %q", r.stdout)
	}
	r = ok("topics", "list", "public/pol", "--prefix", "video/")
	if strings.TrimSpace(r.stdout) != "public/pol/video/uploaded/v1" {
		t.Fatalf("topics list --prefix video/: %q", r.stdout)
	}
	ok("topics", "remove-retention", "public/pol/video/uploaded/v1")
	if p := pol(ok("topics", "get-retention", "public/pol/video/uploaded/v1", "--applied", "--output", "json")); p["retention_time_seconds"] != float64(7*86400) {
		t.Fatalf("after remove-retention: %v", p)
	}
	ok("topics", "remove-message-ttl", "public/pol/video/")

	// Bad values: one line naming the flag or field, nothing changed.
	refused("--size", "namespaces", "set-retention", "--size", "lots", "public/pol")
	refused("--ttl", "topics", "set-message-ttl", "--ttl", "-1", "public/pol/video/")
	refused("--policy", "namespaces", "set-backlog-quota", "--policy", "drop_everything", "public/pol")
	refused("--enable", "namespaces", "set-deduplication", "public/pol")
	refused("--bookkeeper-ensemble", "namespaces", "set-persistence", "-e", "65", "public/pol")
	refused("write_quorum", "topics", "set-persistence", "-e", "1", "-w", "2", "public/pol/audio/a1")
	refused("--time", "namespaces", "set-retention", "--time", "-2", "public/pol")
	refused("limit 8", "topics", "set-message-ttl", "--ttl", "1m", "public/pol/1/2/3/4/5/6/7/8/9")
	if p := pol(ok("namespaces", "get-retention", "public/pol", "--output", "json")); p["retention_time_seconds"] != float64(7*86400) {
		t.Fatalf("a refused change applied: %v", p)
	}
	if p := pol(ok("topics", "get-persistence", "public/pol/audio/a1", "--output", "json")); p["ensemble_size"] != nil {
		t.Fatalf("a refused topic override was stored: %v", p)
	}
}
