package main

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region/regiontest"
)

// TestCLIFailover drives `meridian admin failover set|get` and produce and
// consume with a multi-region --url against two in-process regions: a
// controlled client starts in (and follows) its group's target; the flags
// are validated, naming the flag.
func TestCLIFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts two regions (-short)")
	}
	m := regiontest.StartRegions(t, regiontest.MultiOptions{Regions: []string{"a", "b"}, Brokers: 1})
	urlA, urlB := m.Region("a").Addrs()[0], m.Region("b").Addrs()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm, err := client.NewAdmin(ctx, urlA)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close(ctx)
	if err := adm.CreateNamespace(ctx, "public/fo", &clientv1.NamespacePolicies{RetentionTimeSeconds: -1, RetentionSizeBytes: -1,
		ReplicationRegions: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
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
	regions := "a=" + urlA + ",b=" + urlB

	refused("no target", "admin", "--url", urlA, "failover", "get", "grp")
	refused(`"zz"`, "admin", "--url", urlA, "failover", "set", "grp", "zz")
	r := ok("admin", "--url", urlA, "failover", "set", "grp", "b")
	if !strings.Contains(r.stdout, "failover group grp: region b") {
		t.Fatalf("set: %q", r.stdout)
	}
	r = ok("admin", "--url", urlB, "failover", "get", "grp", "--output", "json")
	if ls := jsonLines(t, r.stdout); len(ls) != 1 || ls[0]["region"] != "b" {
		t.Fatalf("get: %q", r.stdout)
	}

	produce := func(extra ...string) []map[string]any {
		t.Helper()
		args := append([]string{"produce", "--url", regions, "--topic", "public/fo/cli", "--count", "3", "--message", "hi", "--output", "json"}, extra...)
		return jsonLines(t, ok(args...).stdout)
	}
	// Controlled: the group's target is b.
	for _, l := range produce("--failover", "controlled", "--failover-group", "grp") {
		if l["origin_region"] != "b" {
			t.Fatalf("controlled produce stored in %v, want b: %v", l["origin_region"], l)
		}
	}
	// Automatic: the primary a.
	for _, l := range produce("--failover", "auto", "--probe-interval", "100ms") {
		if l["origin_region"] != "a" {
			t.Fatalf("auto produce stored in %v, want a: %v", l["origin_region"], l)
		}
	}
	r = ok("consume", "--url", "b="+urlB+",a="+urlA, "--topic", "public/fo/cli", "--subscription", "s", "--from", "earliest",
		"--count", "6", "--output", "json", "--idle", "60s")
	if n := len(jsonLines(t, r.stdout)); n != 6 {
		t.Fatalf("consume in b got %d messages, want 6: %q", n, r.stdout)
	}

	refused("--failover", "produce", "--url", regions, "--topic", "public/fo/cli", "--failover", "sometimes", "--message", "x")
	refused("--failover-group", "produce", "--url", regions, "--topic", "public/fo/cli", "--failover", "controlled", "--message", "x")
	refused("--failed-probes", "consume", "--url", regions, "--topic", "public/fo/cli", "--subscription", "s", "--failed-probes", "0")
	refused("--probe-interval", "consume", "--url", regions, "--topic", "public/fo/cli", "--subscription", "s", "--probe-interval", "1ms")
	refused("region", "produce", "--url", "a b="+urlA, "--topic", "public/fo/cli", "--message", "x")
}

// TestAdminFailoverMissingAction: `admin failover` alone names its actions.
func TestAdminFailoverMissingAction(t *testing.T) {
	cmd := newAdminCmd()
	cmd.SetArgs([]string{"failover"})
	cmd.SetOut(&strings.Builder{})
	cmd.SetErr(&strings.Builder{})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "get") || !strings.Contains(err.Error(), "set") {
		t.Fatalf("admin failover: %v, want a missing-action error naming get and set", err)
	}
}
