package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The permission model (issue 21, authorization).
//
// Superusers (security.superusers of the broker config) may do
// everything. A tenant's admin roles (tenantRecord.AdminRoles) may do
// every admin operation inside the tenant, and produce and consume on its
// topics. Other roles produce and consume where a grant says so:
//
//   - a namespace grant (NamespacePolicies.permissions) covers every topic
//     of the namespace;
//   - a prefix grant (NamespacePolicies.prefix_permissions) covers the
//     topics whose name below the namespace starts with the prefix and is
//     longer than it ("orders-" covers "orders-eu", not "orders-");
//   - a topic grant (topicPolicyRecord.Permissions) covers the topic and,
//     for a partitioned topic, its partitions (T-partition-N).
//
// All of it lives in the global shard under keys the policy cache mirrors,
// so a check costs no metadata read, and a grant or revoke applies on every
// broker as soon as the cache's watch delivers it.

// Actions a grant may hold.
const (
	// ActionProduce lets a role publish to a topic.
	ActionProduce = "produce"
	// ActionConsume lets a role subscribe to a topic and acknowledge.
	ActionConsume = "consume"
)

// DefaultMaxPermissionGrants is the default of Config.MaxPermissionGrants.
const DefaultMaxPermissionGrants = 1024

// maxRoleBytes bounds a role name.
const maxRoleBytes = 255

// maxGrants is Config.MaxPermissionGrants with its default.
func (s *Server) maxGrants() int {
	if s.cfg.MaxPermissionGrants > 0 {
		return s.cfg.MaxPermissionGrants
	}
	return DefaultMaxPermissionGrants
}

// validateRole checks a role name; the error names field.
func validateRole(field, role string) error {
	if role == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidArgument, field)
	}
	if len(role) > maxRoleBytes {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrInvalidArgument, field, len(role), maxRoleBytes)
	}
	if strings.ContainsAny(role, " \t\r\n,") {
		return fmt.Errorf("%w: %s %q holds a space or a comma", ErrInvalidArgument, field, role)
	}
	return nil
}

// validateRoles checks a list of roles (admin_roles).
func validateRoles(field string, roles []string, limit int) error {
	return validateList(field, "roles", roles, limit, validateRole)
}

// validateActions checks a grant's actions: at least one, each "produce"
// or "consume", none twice.
func validateActions(field string, actions []string) error {
	if len(actions) == 0 {
		return fmt.Errorf("%w: %s is empty: grant %q and/or %q", ErrInvalidArgument, field, ActionProduce, ActionConsume)
	}
	for i, a := range actions {
		if a != ActionProduce && a != ActionConsume {
			return fmt.Errorf("%w: %s[%d] %q is not an action; allowed: %s, %s", ErrInvalidArgument, field, i, a, ActionProduce, ActionConsume)
		}
		if slices.Contains(actions[:i], a) {
			return fmt.Errorf("%w: %s names %q twice", ErrInvalidArgument, field, a)
		}
	}
	return nil
}

// validateGrants checks a role -> actions map against the grant limit.
func validateGrants(field string, g map[string]*clientv1.PermissionActions, limit int) error {
	if len(g) > limit {
		return fmt.Errorf("%w: %s has %d roles, limit %d (broker.max_permission_grants)", ErrInvalidArgument, field, len(g), limit)
	}
	for _, role := range slices.Sorted(maps.Keys(g)) {
		if err := validateRole(field+" role", role); err != nil {
			return err
		}
		if err := validateActions(fmt.Sprintf("%s[%q].actions", field, role), g[role].GetActions()); err != nil {
			return err
		}
	}
	return nil
}

// validatePermissions checks the grant fields of namespace policies.
func (s *Server) validatePermissions(p *clientv1.NamespacePolicies) error {
	limit := s.maxGrants()
	if err := validateGrants("permissions", p.GetPermissions(), limit); err != nil {
		return err
	}
	if len(p.GetPrefixPermissions()) > limit {
		return fmt.Errorf("%w: prefix_permissions has %d prefixes, limit %d (broker.max_permission_grants)", ErrInvalidArgument, len(p.GetPrefixPermissions()), limit)
	}
	for _, pre := range slices.Sorted(maps.Keys(p.GetPrefixPermissions())) {
		if err := validatePermissionPrefix(fmt.Sprintf("prefix_permissions[%q]", pre), pre); err != nil {
			return err
		}
		if err := validateGrants(fmt.Sprintf("prefix_permissions[%q]", pre), p.GetPrefixPermissions()[pre].GetRoles(), limit); err != nil {
			return err
		}
	}
	return nil
}

// validatePermissionPrefix checks a prefix below the namespace.
func validatePermissionPrefix(field, rel string) error {
	if rel == "" {
		return fmt.Errorf("%w: %s is empty (a namespace grant covers every topic)", ErrInvalidArgument, field)
	}
	if len(rel) > MaxTopicBytes {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrInvalidArgument, field, len(rel), MaxTopicBytes)
	}
	if strings.HasPrefix(rel, "/") || strings.Contains(rel, "//") {
		return fmt.Errorf("%w: %s %q has an empty segment", ErrInvalidArgument, field, rel)
	}
	return nil
}

// permissionScope is the target of a grant request.
type permissionScope struct {
	kind  string // "namespace", "topic" or "prefix"
	ns    string // tenant/namespace
	topic TopicName
	rel   string // prefix below the namespace
}

// parseScope validates that exactly one of namespace, topic and prefix is
// set.
func parseScope(ns, topic, prefix string) (permissionScope, error) {
	n := 0
	for _, v := range []string{ns, topic, prefix} {
		if v != "" {
			n++
		}
	}
	if n != 1 {
		return permissionScope{}, fmt.Errorf("%w: set exactly one of namespace, topic and prefix (%d set)", ErrInvalidArgument, n)
	}
	switch {
	case ns != "":
		if _, _, err := ParseNamespace(ns); err != nil {
			return permissionScope{}, err
		}
		return permissionScope{kind: "namespace", ns: ns}, nil
	case topic != "":
		t, err := ParseTopic(topic)
		if err != nil {
			return permissionScope{}, err
		}
		return permissionScope{kind: "topic", ns: t.NamespaceName(), topic: t}, nil
	default:
		parts := strings.SplitN(prefix, "/", 3)
		if len(parts) < 3 {
			return permissionScope{}, fmt.Errorf("%w: prefix %q must be tenant/namespace/p (p: the start of topic names below the namespace)", ErrInvalidArgument, prefix)
		}
		nsName := parts[0] + "/" + parts[1]
		if _, _, err := ParseNamespace(nsName); err != nil {
			return permissionScope{}, err
		}
		if err := validatePermissionPrefix("prefix", parts[2]); err != nil {
			return permissionScope{}, err
		}
		return permissionScope{kind: "prefix", ns: nsName, rel: parts[2]}, nil
	}
}

// updateNamespace rewrites a namespace's policies with fn (compare and
// swap, retried on a concurrent change).
func (s *Server) updateNamespace(ctx context.Context, ns string, fn func(p *clientv1.NamespacePolicies) error) error {
	key := namespacePrefix + ns
	for attempt := 0; ; attempt++ {
		kv, err := s.cfg.Global.Get(ctx, key, metadata.ReadOptions{})
		if errors.Is(err, metadata.ErrNotFound) {
			return fmt.Errorf("%w: namespace %s does not exist", ErrNotFound, ns)
		}
		if err != nil {
			return fmt.Errorf("%w: read namespace %s: %v", ErrUnavailable, ns, err)
		}
		p, err := parsePolicies(ns, kv.Value)
		if err != nil {
			return err
		}
		if err := fn(p); err != nil {
			return err
		}
		val, _ := protojson.Marshal(p)
		nkv, err := s.cfg.Global.Put(ctx, key, val, kv.Version, 0)
		if err == nil {
			s.policies.learn(nkv)
			s.policyChanged(key)
			return nil
		}
		if !errors.Is(err, metadata.ErrVersionMismatch) {
			return fmt.Errorf("%w: write namespace %s: %v", ErrUnavailable, ns, err)
		}
		if attempt >= 5 {
			return fmt.Errorf("%w: namespace %s changed concurrently; retry", ErrUnavailable, ns)
		}
	}
}

func (a *adminService) GrantPermission(ctx context.Context, r *clientv1.GrantPermissionRequest) (*clientv1.GrantPermissionResponse, error) {
	sc, err := parseScope(r.GetNamespace(), r.GetTopic(), r.GetPrefix())
	if err != nil {
		return nil, GRPCError(err)
	}
	if err := validateRole("role", r.GetRole()); err != nil {
		return nil, GRPCError(err)
	}
	if err := validateActions("actions", r.GetActions()); err != nil {
		return nil, GRPCError(err)
	}
	acts := &clientv1.PermissionActions{Actions: slices.Sorted(slices.Values(r.GetActions()))}
	limit := a.b.maxGrants()
	full := func(n int, what string) error {
		if n > limit {
			return fmt.Errorf("%w: %s would hold %d roles, limit %d (broker.max_permission_grants)", ErrInvalidArgument, what, n, limit)
		}
		return nil
	}
	switch sc.kind {
	case "topic":
		if _, err := a.b.getPolicies(ctx, sc.ns); err != nil {
			return nil, GRPCError(err)
		}
		err = a.b.updatePolicyRecord(ctx, topicPolicyPrefix+sc.topic.String(), func(rec *topicPolicyRecord, _ bool) error {
			if rec.Permissions == nil {
				rec.Permissions = map[string][]string{}
			}
			rec.Permissions[r.GetRole()] = acts.Actions
			return full(len(rec.Permissions), "topic "+sc.topic.String())
		})
	default:
		err = a.b.updateNamespace(ctx, sc.ns, func(p *clientv1.NamespacePolicies) error {
			if sc.kind == "namespace" {
				if p.Permissions == nil {
					p.Permissions = map[string]*clientv1.PermissionActions{}
				}
				p.Permissions[r.GetRole()] = acts
				return full(len(p.Permissions), "namespace "+sc.ns+" permissions")
			}
			if p.PrefixPermissions == nil {
				p.PrefixPermissions = map[string]*clientv1.RolePermissions{}
			}
			rp := p.PrefixPermissions[sc.rel]
			if rp == nil {
				rp = &clientv1.RolePermissions{Roles: map[string]*clientv1.PermissionActions{}}
				p.PrefixPermissions[sc.rel] = rp
				if err := full(len(p.PrefixPermissions), "namespace "+sc.ns+" prefix_permissions"); err != nil {
					return err
				}
			}
			if rp.Roles == nil {
				rp.Roles = map[string]*clientv1.PermissionActions{}
			}
			rp.Roles[r.GetRole()] = acts
			return full(len(rp.Roles), "prefix "+sc.rel)
		})
	}
	if err != nil {
		return nil, GRPCError(err)
	}
	a.b.log.Info("permission granted", "scope", sc.kind, "namespace", sc.ns, "topic", sc.topic.Topic, "prefix", sc.rel,
		"role", r.GetRole(), "actions", acts.Actions)
	return &clientv1.GrantPermissionResponse{}, nil
}

func (a *adminService) RevokePermission(ctx context.Context, r *clientv1.RevokePermissionRequest) (*clientv1.RevokePermissionResponse, error) {
	sc, err := parseScope(r.GetNamespace(), r.GetTopic(), r.GetPrefix())
	if err != nil {
		return nil, GRPCError(err)
	}
	if err := validateRole("role", r.GetRole()); err != nil {
		return nil, GRPCError(err)
	}
	role := r.GetRole()
	notFound := fmt.Errorf("%w: role %s has no grant on %s", ErrNotFound, role, sc.describe())
	switch sc.kind {
	case "topic":
		err = a.b.updatePolicyRecord(ctx, topicPolicyPrefix+sc.topic.String(), func(rec *topicPolicyRecord, _ bool) error {
			if _, ok := rec.Permissions[role]; !ok {
				return notFound
			}
			delete(rec.Permissions, role)
			if len(rec.Permissions) == 0 {
				rec.Permissions = nil
			}
			return nil
		})
	default:
		err = a.b.updateNamespace(ctx, sc.ns, func(p *clientv1.NamespacePolicies) error {
			if sc.kind == "namespace" {
				if _, ok := p.Permissions[role]; !ok {
					return notFound
				}
				delete(p.Permissions, role)
				return nil
			}
			rp := p.PrefixPermissions[sc.rel]
			if _, ok := rp.GetRoles()[role]; !ok {
				return notFound
			}
			delete(rp.Roles, role)
			if len(rp.Roles) == 0 {
				delete(p.PrefixPermissions, sc.rel)
			}
			return nil
		})
	}
	if err != nil {
		return nil, GRPCError(err)
	}
	a.b.log.Info("permission revoked", "scope", sc.kind, "namespace", sc.ns, "topic", sc.topic.Topic, "prefix", sc.rel, "role", role)
	return &clientv1.RevokePermissionResponse{}, nil
}

func (sc permissionScope) describe() string {
	switch sc.kind {
	case "topic":
		return "topic " + sc.topic.String()
	case "prefix":
		return "prefix " + sc.ns + "/" + sc.rel
	}
	return "namespace " + sc.ns
}

func (a *adminService) GetPermissions(ctx context.Context, r *clientv1.GetPermissionsRequest) (*clientv1.GetPermissionsResponse, error) {
	sc, err := parseScope(r.GetNamespace(), r.GetTopic(), r.GetPrefix())
	if err != nil {
		return nil, GRPCError(err)
	}
	if sc.kind == "topic" {
		kv, stale, err := a.b.policies.fresh(ctx, topicPolicyPrefix+sc.topic.String())
		out := &clientv1.GetPermissionsResponse{Permissions: map[string]*clientv1.PermissionActions{}, Stale: stale}
		if errors.Is(err, metadata.ErrNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, GRPCError(fmt.Errorf("%w: read topic %s: %v", ErrUnavailable, sc.topic, err))
		}
		var rec topicPolicyRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return nil, GRPCError(fmt.Errorf("broker: policy record of %s corrupt: %v", sc.topic, err))
		}
		for role, acts := range rec.Permissions {
			out.Permissions[role] = &clientv1.PermissionActions{Actions: acts}
		}
		return out, nil
	}
	kv, stale, err := a.b.policies.fresh(ctx, namespacePrefix+sc.ns)
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, GRPCError(fmt.Errorf("%w: namespace %s does not exist", ErrNotFound, sc.ns))
	}
	if err != nil {
		return nil, GRPCError(fmt.Errorf("%w: read namespace %s: %v", ErrUnavailable, sc.ns, err))
	}
	p, err := parsePolicies(sc.ns, kv.Value)
	if err != nil {
		return nil, GRPCError(err)
	}
	if sc.kind == "prefix" {
		return &clientv1.GetPermissionsResponse{Permissions: p.GetPrefixPermissions()[sc.rel].GetRoles(), Stale: stale}, nil
	}
	return &clientv1.GetPermissionsResponse{Permissions: p.GetPermissions(), PrefixPermissions: p.GetPrefixPermissions(), Stale: stale}, nil
}

func (a *adminService) UpdateTenant(ctx context.Context, r *clientv1.UpdateTenantRequest) (*clientv1.UpdateTenantResponse, error) {
	tenant := r.GetTenant()
	if err := ValidateName("tenant", tenant); err != nil {
		return nil, GRPCError(err)
	}
	if err := validateRoles("admin_roles", r.GetAdminRoles(), a.b.maxGrants()); err != nil {
		return nil, GRPCError(err)
	}
	key := tenantPrefix + tenant
	for attempt := 0; ; attempt++ {
		kv, err := a.b.cfg.Global.Get(ctx, key, metadata.ReadOptions{})
		if errors.Is(err, metadata.ErrNotFound) {
			return nil, GRPCError(fmt.Errorf("%w: tenant %s does not exist", ErrNotFound, tenant))
		}
		if err != nil {
			return nil, GRPCError(fmt.Errorf("%w: read tenant %s: %v", ErrUnavailable, tenant, err))
		}
		rec, err := parseTenant(tenant, kv.Value)
		if err != nil {
			return nil, GRPCError(err)
		}
		rec.AdminRoles = slices.Clone(r.GetAdminRoles())
		val, _ := json.Marshal(rec)
		nkv, err := a.b.cfg.Global.Put(ctx, key, val, kv.Version, 0)
		if err == nil {
			a.b.policies.learn(nkv)
			a.b.log.Info("tenant admin roles set", "tenant", tenant, "admin_roles", rec.AdminRoles)
			return &clientv1.UpdateTenantResponse{}, nil
		}
		if !errors.Is(err, metadata.ErrVersionMismatch) || attempt >= 5 {
			return nil, GRPCError(fmt.Errorf("%w: write tenant %s: %v", ErrUnavailable, tenant, err))
		}
	}
}

// keepPermissions carries the stored grants of cur into a SetNamespacePolicies
// request p, refusing a request that would change them (grants change
// through GrantPermission and RevokePermission only, which the tenant
// admin rule guards the same way, but a policy edit must never drop them
// by accident).
func keepPermissions(cur, p *clientv1.NamespacePolicies) error {
	if len(p.GetPermissions()) > 0 && !proto.Equal(&clientv1.NamespacePolicies{Permissions: cur.GetPermissions()}, &clientv1.NamespacePolicies{Permissions: p.GetPermissions()}) {
		return fmt.Errorf("%w: policies.permissions differ from the stored grants: change them with grant-permission / revoke-permission", ErrInvalidArgument)
	}
	if len(p.GetPrefixPermissions()) > 0 && !proto.Equal(&clientv1.NamespacePolicies{PrefixPermissions: cur.GetPrefixPermissions()}, &clientv1.NamespacePolicies{PrefixPermissions: p.GetPrefixPermissions()}) {
		return fmt.Errorf("%w: policies.prefix_permissions differ from the stored grants: change them with grant-prefix-permission / revoke-prefix-permission", ErrInvalidArgument)
	}
	p.Permissions, p.PrefixPermissions = cur.GetPermissions(), cur.GetPrefixPermissions()
	return nil
}

// hasAction reports whether acts holds action.
func hasAction(acts []string, action string) bool { return slices.Contains(acts, action) }

// isTenantAdmin reports whether role administers tenant (read through the
// policy cache).
func (s *Server) isTenantAdmin(ctx context.Context, tenant, role string) (bool, error) {
	rec, err := s.getTenant(ctx, tenant)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return slices.Contains(rec.AdminRoles, role), nil
}

// granted reports whether role holds action on topic t through a
// namespace, prefix or topic grant (tenant admins and superusers are
// decided by the caller). A grant on a partitioned topic covers its
// partitions.
func (s *Server) granted(ctx context.Context, t TopicName, role, action string) (bool, error) {
	p, err := s.getPolicies(ctx, t.NamespaceName())
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if hasAction(p.GetPermissions()[role].GetActions(), action) {
		return true, nil
	}
	names := []string{t.Topic}
	if base, ok := partitionBase(t.Topic); ok {
		names = append(names, base)
	}
	for pre, rp := range p.GetPrefixPermissions() {
		for _, n := range names {
			// A prefix covers longer names only.
			if len(n) > len(pre) && strings.HasPrefix(n, pre) && hasAction(rp.GetRoles()[role].GetActions(), action) {
				return true, nil
			}
		}
	}
	for _, n := range names {
		rec, err := s.readPolicyRecord(ctx, topicPolicyPrefix+t.NamespaceName()+"/"+n)
		if err != nil {
			return false, err
		}
		if rec != nil && hasAction(rec.Permissions[role], action) {
			return true, nil
		}
	}
	return false, nil
}

func addPermissionAdminRoutes(routes map[string]adminRoute, a *adminService) {
	routes["UpdateTenant"] = route(func() *clientv1.UpdateTenantRequest { return &clientv1.UpdateTenantRequest{} }, a.UpdateTenant)
	routes["GrantPermission"] = route(func() *clientv1.GrantPermissionRequest { return &clientv1.GrantPermissionRequest{} }, a.GrantPermission)
	routes["RevokePermission"] = route(func() *clientv1.RevokePermissionRequest { return &clientv1.RevokePermissionRequest{} }, a.RevokePermission)
	routes["GetPermissions"] = route(func() *clientv1.GetPermissionsRequest { return &clientv1.GetPermissionsRequest{} }, a.GetPermissions)
}
