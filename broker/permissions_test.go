package broker_test

import (
	"context"
	"strings"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestPermissionGrantsModel: grants per namespace, prefix and topic are
// stored, reported, revoked; bad actions are refused naming the field; a
// policy edit keeps the grants; tenant admin roles round-trip.
func TestPermissionGrantsModel(t *testing.T) {
	_, adm, _ := oneBroker(t, nil)
	ctx := context.Background()
	if _, err := adm.CreateTenant(ctx, &clientv1.CreateTenantRequest{Tenant: "acme", AdminRoles: []string{"ops"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateNamespace(ctx, &clientv1.CreateNamespaceRequest{Namespace: "acme/ns"}); err != nil {
		t.Fatal(err)
	}
	ti, err := adm.GetTenant(ctx, &clientv1.GetTenantRequest{Tenant: "acme"})
	if err != nil || strings.Join(ti.GetAdminRoles(), ",") != "ops" {
		t.Fatalf("admin roles after create: %v %v", ti, err)
	}
	if _, err := adm.UpdateTenant(ctx, &clientv1.UpdateTenantRequest{Tenant: "acme", AdminRoles: []string{"ops", "dev"}}); err != nil {
		t.Fatal(err)
	}
	if ti, _ = adm.GetTenant(ctx, &clientv1.GetTenantRequest{Tenant: "acme"}); strings.Join(ti.GetAdminRoles(), ",") != "ops,dev" {
		t.Fatalf("admin roles after update: %v", ti)
	}

	grant := func(r *clientv1.GrantPermissionRequest) {
		t.Helper()
		if _, err := adm.GrantPermission(ctx, r); err != nil {
			t.Fatalf("grant %v: %v", r, err)
		}
	}
	grant(&clientv1.GrantPermissionRequest{Namespace: "acme/ns", Role: "app", Actions: []string{"produce", "consume"}})
	grant(&clientv1.GrantPermissionRequest{Prefix: "acme/ns/orders-", Role: "shop", Actions: []string{"produce"}})
	grant(&clientv1.GrantPermissionRequest{Topic: "acme/ns/audit", Role: "auditor", Actions: []string{"consume"}})

	_, err = adm.GrantPermission(ctx, &clientv1.GrantPermissionRequest{Namespace: "acme/ns", Role: "x", Actions: []string{"produce", "delete"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "actions[1]") {
		t.Fatalf("bad action: %v", err)
	}
	_, err = adm.GrantPermission(ctx, &clientv1.GrantPermissionRequest{Namespace: "acme/ns", Topic: "acme/ns/t", Role: "x", Actions: []string{"produce"}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("two scopes: %v", err)
	}

	np, err := adm.GetPermissions(ctx, &clientv1.GetPermissionsRequest{Namespace: "acme/ns"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(np.GetPermissions()["app"].GetActions(), ","); got != "consume,produce" {
		t.Fatalf("namespace grant: %q (%v)", got, np)
	}
	if got := strings.Join(np.GetPrefixPermissions()["orders-"].GetRoles()["shop"].GetActions(), ","); got != "produce" {
		t.Fatalf("prefix grant: %q (%v)", got, np)
	}
	tp, err := adm.GetPermissions(ctx, &clientv1.GetPermissionsRequest{Topic: "acme/ns/audit"})
	if err != nil || strings.Join(tp.GetPermissions()["auditor"].GetActions(), ",") != "consume" {
		t.Fatalf("topic grant: %v %v", tp, err)
	}

	// A policy edit (get, change, set) keeps the grants; changing them
	// through SetNamespacePolicies is refused.
	gp, err := adm.GetNamespacePolicies(ctx, &clientv1.GetNamespacePoliciesRequest{Namespace: "acme/ns"})
	if err != nil {
		t.Fatal(err)
	}
	pol := gp.GetPolicies()
	pol.RetentionTimeSeconds = 120
	if _, err := adm.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: "acme/ns", Policies: pol}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: "acme/ns", Policies: &clientv1.NamespacePolicies{RetentionTimeSeconds: 60}}); err != nil {
		t.Fatal(err)
	}
	pol.Permissions["intruder"] = &clientv1.PermissionActions{Actions: []string{"produce"}}
	if _, err := adm.SetNamespacePolicies(ctx, &clientv1.SetNamespacePoliciesRequest{Namespace: "acme/ns", Policies: pol}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("grants changed through SetNamespacePolicies: %v", err)
	}
	if np, _ = adm.GetPermissions(ctx, &clientv1.GetPermissionsRequest{Namespace: "acme/ns"}); np.GetPermissions()["app"] == nil || np.GetPermissions()["intruder"] != nil {
		t.Fatalf("grants after policy edits: %v", np)
	}
	// Topic overrides may not set grants as policy fields.
	_, err = adm.SetTopicPolicies(ctx, &clientv1.SetTopicPoliciesRequest{Topic: "acme/ns/audit", Fields: []string{"permissions"}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("permissions as a topic policy field: %v", err)
	}

	for _, r := range []*clientv1.RevokePermissionRequest{{Namespace: "acme/ns", Role: "app"}, {Prefix: "acme/ns/orders-", Role: "shop"}, {Topic: "acme/ns/audit", Role: "auditor"}} {
		if _, err := adm.RevokePermission(ctx, r); err != nil {
			t.Fatalf("revoke %v: %v", r, err)
		}
		if _, err := adm.RevokePermission(ctx, r); status.Code(err) != codes.NotFound {
			t.Fatalf("second revoke %v: %v", r, err)
		}
	}
	np, _ = adm.GetPermissions(ctx, &clientv1.GetPermissionsRequest{Namespace: "acme/ns"})
	tp, _ = adm.GetPermissions(ctx, &clientv1.GetPermissionsRequest{Topic: "acme/ns/audit"})
	if len(np.GetPermissions())+len(np.GetPrefixPermissions())+len(tp.GetPermissions()) != 0 {
		t.Fatalf("grants after revoke: %v %v", np, tp)
	}
}
