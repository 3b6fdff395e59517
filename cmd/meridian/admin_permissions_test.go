package main

import (
	"strings"
	"testing"
)

// TestCLIPermissions drives the grant commands against a standalone
// region: tenants create/update --admin-roles, namespace, prefix and topic
// grants with their listings, revokes, and a bad action refused naming
// the field.
func TestCLIPermissions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	adm := func(args ...string) []string { return append([]string{"admin", "--url", url}, args...) }
	ok := func(args ...string) string {
		t.Helper()
		r := runCLI(t, "", adm(args...)...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		return r.stdout
	}
	ok("tenants", "create", "acme", "--admin-roles", "ops,dev")
	if out := ok("tenants", "get", "acme"); !strings.Contains(out, "admin roles: ops,dev") {
		t.Fatalf("tenants get: %q", out)
	}
	ok("tenants", "update", "acme", "--admin-roles", "ops")
	if out := ok("tenants", "get", "acme"); !strings.Contains(out, "admin roles: ops\n") {
		t.Fatalf("tenants get after update: %q", out)
	}
	ok("namespaces", "create", "acme/ns")
	ok("namespaces", "grant-permission", "acme/ns", "--role", "app", "--actions", "produce,consume")
	ok("namespaces", "grant-prefix-permission", "acme/ns/orders-", "--role", "shop", "--actions", "produce")
	ok("topics", "grant-permission", "acme/ns/audit", "--role", "auditor", "--actions", "consume")
	if out := ok("namespaces", "permissions", "acme/ns"); !strings.Contains(out, "app: consume,produce") || !strings.Contains(out, "prefix orders-: shop: produce") {
		t.Fatalf("namespaces permissions: %q", out)
	}
	if out := ok("namespaces", "prefix-permissions", "acme/ns/orders-"); !strings.Contains(out, "shop: produce") {
		t.Fatalf("namespaces prefix-permissions: %q", out)
	}
	if out := ok("topics", "permissions", "acme/ns/audit"); !strings.Contains(out, "auditor: consume") {
		t.Fatalf("topics permissions: %q", out)
	}
	r := runCLI(t, "", adm("namespaces", "grant-permission", "acme/ns", "--role", "x", "--actions", "produce,delete")...)
	if r.code == 0 || !strings.Contains(r.stderr, "actions[1]") {
		t.Fatalf("bad action: exit %d, stderr %q", r.code, r.stderr)
	}
	ok("namespaces", "revoke-permission", "acme/ns", "--role", "app")
	ok("namespaces", "revoke-prefix-permission", "acme/ns/orders-", "--role", "shop")
	ok("topics", "revoke-permission", "acme/ns/audit", "--role", "auditor")
	if out := ok("namespaces", "permissions", "acme/ns"); strings.TrimSpace(out) != "" {
		t.Fatalf("namespaces permissions after revoke: %q", out)
	}
}
