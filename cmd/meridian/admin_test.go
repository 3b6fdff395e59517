package main

import (
	"strings"
	"testing"
)

func TestCLIAdminTenantsNamespacesTopics(t *testing.T) {
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
	ok("tenants", "create", "acme")
	ok("namespaces", "create", "acme/app")
	ok("topics", "create", "acme/app/orders")
	r := ok("tenants", "list", "--output", "json")
	ls := jsonLines(t, r.stdout)
	if len(ls) != 1 || !strings.Contains(r.stdout, `"acme"`) || !strings.Contains(r.stdout, `"public"`) {
		t.Fatalf("tenants list json: %q", r.stdout)
	}
	r = ok("topics", "list", "acme/app")
	if strings.TrimSpace(r.stdout) != "acme/app/orders" {
		t.Fatalf("topics list: %q", r.stdout)
	}
	r = ok("topics", "stats", "acme/app/orders", "--output", "json")
	if st := jsonLines(t, r.stdout); len(st) != 1 || st[0]["topic"] != "acme/app/orders" {
		t.Fatalf("stats: %q", r.stdout)
	}
	ok("subscriptions", "create", "acme/app/orders", "sub1", "--from", "earliest")
	r = ok("subscriptions", "list", "acme/app/orders", "--output", "json")
	if !strings.Contains(r.stdout, `"sub1"`) {
		t.Fatalf("subscriptions: %q", r.stdout)
	}
	ok("subscriptions", "reset", "acme/app/orders", "sub1", "latest")
	ok("namespaces", "set-policies", "acme/app", "--retention-time", "1h")
	r = ok("namespaces", "policies", "acme/app", "--output", "json")
	if p := jsonLines(t, r.stdout); len(p) != 1 || p[0]["retentionTimeSeconds"] != float64(3600) {
		t.Fatalf("policies: %q", r.stdout)
	}
	// Refusals: one-line errors, non-zero exit, nothing changed.
	r = runCLI(t, "", "admin", "--url", url, "namespaces", "delete", "acme/app")
	if r.code == 0 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Fatalf("delete non-empty namespace: exit %d, %q", r.code, r.stderr)
	}
	r = runCLI(t, "", "admin", "--url", url, "tenants", "create", "bad name!")
	if r.code == 0 || !strings.Contains(r.stderr, "meridian: ") {
		t.Fatalf("invalid tenant: exit %d, %q", r.code, r.stderr)
	}
	r = ok("tenants", "list")
	if strings.Contains(r.stdout, "bad") {
		t.Fatalf("invalid tenant was created: %q", r.stdout)
	}
	ok("subscriptions", "delete", "acme/app/orders", "sub1")
	ok("topics", "delete", "acme/app/orders")
	ok("namespaces", "delete", "acme/app")
	ok("tenants", "delete", "acme")
}

func TestCLIAdminBookies(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	ok := func(args ...string) cliResult {
		t.Helper()
		r := runCLI(t, "", append([]string{"admin", "--url", url, "bookies"}, args...)...)
		if r.code != 0 {
			t.Fatalf("bookies %v: exit %d: %s", args, r.code, r.stderr)
		}
		return r
	}
	r := ok("list", "--output", "json")
	ls := jsonLines(t, r.stdout)
	if len(ls) != 1 || ls[0]["bookie_id"] != "bookie-0" || ls[0]["live"] != true || ls[0]["decommissioned"] != false || ls[0]["under_replicated_ledgers"] != float64(0) {
		t.Fatalf("bookies list json: %q", r.stdout)
	}
	r = ok("list")
	if !strings.HasPrefix(r.stdout, "bookie-0 read-write addr=127.0.0.1:") || !strings.Contains(r.stdout, "under-replicated ledgers: 0") {
		t.Fatalf("bookies list text: %q", r.stdout)
	}
	ok("pause", "--reason", "disk swap")
	r = ok("status", "--output", "json")
	if st := jsonLines(t, r.stdout); len(st) != 1 || st[0]["paused"] != true || st[0]["pausedReason"] != "disk swap" {
		t.Fatalf("status json after pause: %q", r.stdout)
	}
	ok("resume")
	r = ok("status")
	if !strings.HasPrefix(r.stdout, "autorecovery: running, auditor: ") {
		t.Fatalf("status text: %q", r.stdout)
	}
	ok("decommission", "bookie-0")
	r = ok("list", "--output", "json")
	if ls := jsonLines(t, r.stdout); len(ls) != 1 || ls[0]["decommissioned"] != true {
		t.Fatalf("list after decommission: %q", r.stdout)
	}
	ok("recommission", "bookie-0")
	// Bad input and unreachable servers: one line on stderr, non-zero exit.
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"admin", "--url", url, "bookies", "decommission"}, "want 1 argument"},
		{[]string{"admin", "--url", url, "bookies", "decommission", "a/b"}, "bookie ID"},
		{[]string{"admin", "--url", url, "bookies", "list", "--output", "yaml"}, "--output"},
		{[]string{"admin", "--url", url, "bookies"}, "missing action"},
		{[]string{"admin", "--url", cliFreeAddr(t), "--connect-timeout", "2s", "bookies", "list"}, "--url"},
	} {
		r := runCLI(t, "", bad.args...)
		if r.code == 0 || !strings.Contains(r.stderr, bad.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Fatalf("%v: exit %d, stderr %q (want one line mentioning %q)", bad.args, r.code, r.stderr, bad.want)
		}
	}
	r = ok("list", "--output", "json")
	if ls := jsonLines(t, r.stdout); len(ls) != 1 || ls[0]["decommissioned"] != false {
		t.Fatalf("list after bad input: %q", r.stdout)
	}
}
