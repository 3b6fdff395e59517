package client

import (
	"context"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Permission actions (issue 21, authorization).
const (
	// ActionProduce lets a role publish to a topic.
	ActionProduce = "produce"
	// ActionConsume lets a role subscribe to a topic.
	ActionConsume = "consume"
)

// PermissionScope names what a grant covers: exactly one of Namespace
// ("tenant/ns": every topic), Topic ("tenant/ns/t": the topic and, when
// partitioned, its partitions) and Prefix ("tenant/ns/p": the topics whose
// name below the namespace starts with p and is longer than p).
type PermissionScope struct {
	Namespace, Topic, Prefix string
}

func (s PermissionScope) String() string {
	switch {
	case s.Topic != "":
		return "topic " + s.Topic
	case s.Prefix != "":
		return "prefix " + s.Prefix
	}
	return "namespace " + s.Namespace
}

// Permissions are the grants of a scope: Roles maps a role to its actions;
// Prefixes (for a namespace) maps a prefix below the namespace to its
// roles' actions.
type Permissions = clientv1.GetPermissionsResponse

// CreateTenantWithAdmins creates a tenant with admin roles (roles that may
// do every admin operation inside the tenant); allowedRegions empty = all.
func (a *Admin) CreateTenantWithAdmins(ctx context.Context, tenant string, allowedRegions, adminRoles []string) error {
	return write(ctx, a, "create tenant "+tenant, func(ctx context.Context) error {
		_, err := a.api.CreateTenant(ctx, &clientv1.CreateTenantRequest{Tenant: tenant, AllowedRegions: allowedRegions, AdminRoles: adminRoles})
		return err
	})
}

// UpdateTenant replaces a tenant's admin roles (empty = none).
func (a *Admin) UpdateTenant(ctx context.Context, tenant string, adminRoles []string) error {
	return write(ctx, a, "update tenant "+tenant, func(ctx context.Context) error {
		_, err := a.api.UpdateTenant(ctx, &clientv1.UpdateTenantRequest{Tenant: tenant, AdminRoles: adminRoles})
		return err
	})
}

// GrantPermission grants role actions (ActionProduce, ActionConsume) on
// scope, replacing its earlier actions there.
func (a *Admin) GrantPermission(ctx context.Context, scope PermissionScope, role string, actions []string) error {
	return write(ctx, a, "grant "+role+" on "+scope.String(), func(ctx context.Context) error {
		_, err := a.api.GrantPermission(ctx, &clientv1.GrantPermissionRequest{Namespace: scope.Namespace, Topic: scope.Topic,
			Prefix: scope.Prefix, Role: role, Actions: actions})
		return err
	})
}

// RevokePermission removes role's grant on scope.
func (a *Admin) RevokePermission(ctx context.Context, scope PermissionScope, role string) error {
	return write(ctx, a, "revoke "+role+" on "+scope.String(), func(ctx context.Context) error {
		_, err := a.api.RevokePermission(ctx, &clientv1.RevokePermissionRequest{Namespace: scope.Namespace, Topic: scope.Topic,
			Prefix: scope.Prefix, Role: role})
		return err
	})
}

// GetPermissions reports the grants of scope.
func (a *Admin) GetPermissions(ctx context.Context, scope PermissionScope) (*Permissions, error) {
	return read(ctx, a, "permissions of "+scope.String(), func(ctx context.Context) (*clientv1.GetPermissionsResponse, error) {
		return a.api.GetPermissions(ctx, &clientv1.GetPermissionsRequest{Namespace: scope.Namespace, Topic: scope.Topic, Prefix: scope.Prefix})
	})
}
