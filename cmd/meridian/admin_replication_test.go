package main

import (
	"strings"
	"testing"
)

// TestCLIReplicationPolicyAndOrigins drives the replication commands and
// the origin fields of produce/consume --output json against a standalone
// region (region "standalone").
func TestCLIReplicationPolicyAndOrigins(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	run := func(args ...string) cliResult {
		t.Helper()
		return runCLI(t, "", args...)
	}
	ok := func(args ...string) cliResult {
		t.Helper()
		r := run(args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		return r
	}
	refused := func(part string, args ...string) {
		t.Helper()
		r := run(args...)
		if r.code == 0 || !strings.Contains(r.stderr, part) {
			t.Fatalf("%v: exit %d, stderr %q; want a refusal naming %s", args, r.code, r.stderr, part)
		}
	}
	adm := func(args ...string) []string { return append([]string{"admin", "--url", url}, args...) }

	r := ok(adm("regions", "list", "--output", "json")...)
	ls := jsonLines(t, r.stdout)
	if len(ls) != 1 || ls[0]["name"] != "standalone" || ls[0]["local"] != true || ls[0]["reachable"] != true {
		t.Fatalf("regions list: %q", r.stdout)
	}
	r = ok(adm("regions", "list")...)
	if !strings.HasPrefix(r.stdout, "standalone endpoints=") || !strings.Contains(r.stdout, " local ") {
		t.Fatalf("regions list text: %q", r.stdout)
	}

	refused(`"zz"`, adm("namespaces", "set-replication", "public/default", "--regions", "standalone,zz")...)
	ok(adm("namespaces", "set-replication", "public/default", "--regions", "standalone")...)
	r = ok(adm("namespaces", "get-replication", "public/default", "--output", "json")...)
	if ls := jsonLines(t, r.stdout); len(ls) != 1 || !strings.Contains(r.stdout, `"regions":["standalone"]`) || ls[0]["stale"] != false {
		t.Fatalf("get-replication: %q", r.stdout)
	}

	ok(adm("tenants", "create", "acme", "--allowed-regions", "standalone")...)
	r = ok(adm("tenants", "get", "acme")...)
	if !strings.Contains(r.stdout, "allowed regions: standalone") {
		t.Fatalf("tenants get: %q", r.stdout)
	}
	refused("allowed_regions", adm("tenants", "set-allowed-regions", "acme", "--regions", "x,y,x")...)
	ok(adm("tenants", "set-allowed-regions", "acme", "--regions", "")...)

	ok(adm("topics", "set-replication", "public/default/local-only", "--regions", "")...)
	r = ok(adm("topics", "get-replication", "public/default/local-only")...)
	if !strings.Contains(r.stdout, "override: off; replicates to: none") {
		t.Fatalf("topics get-replication: %q", r.stdout)
	}
	refused(`"standalone"`, "produce", "--url", url, "--topic", "public/default/local-only", "--message", "m", "--replicate-to", "standalone")
	ok(adm("topics", "remove-replication", "public/default/local-only")...)
	refused("mutually exclusive", "produce", "--url", url, "--topic", "public/default/o", "--message", "m", "--replicate-to", "a", "--no-replication")

	topic := "public/default/origins"
	ok(adm("topics", "create", topic)...)
	ok(adm("subscriptions", "create", topic, "s", "--from", "earliest")...)
	r = ok("produce", "--url", url, "--topic", topic, "--count", "3", "--output", "json", "--replicate-to", "standalone")
	produced := jsonLines(t, r.stdout)
	if len(produced) != 3 {
		t.Fatalf("produce: %q", r.stdout)
	}
	for _, l := range produced {
		if l["origin_region"] != "standalone" || l["origin_id"] != l["id"] {
			t.Fatalf("produce line %v: want origin_region standalone and origin_id = id", l)
		}
	}
	ok("produce", "--url", url, "--topic", topic, "--message", "local", "--no-replication")
	r = ok("consume", "--url", url, "--topic", topic, "--subscription", "s", "--count", "4", "--output", "json")
	consumed := jsonLines(t, r.stdout)
	if len(consumed) != 4 {
		t.Fatalf("consume: %q", r.stdout)
	}
	for i, l := range consumed {
		if l["origin_region"] != "standalone" || l["origin_id"] != l["id"] {
			t.Fatalf("consume line %v: want origin_region standalone and origin_id = id", l)
		}
		if i < 3 && l["id"] != produced[i]["id"] {
			t.Fatalf("consumed %v, produced %v", l, produced[i])
		}
	}
}
