package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/metadata"
	"google.golang.org/protobuf/encoding/protojson"
)

// Replication policy (issue 8).
//
// A namespace's replication_regions list the regions its topics replicate
// to; a topic may override it (topic-policies/<tenant>/<ns>/<topic> in the
// global shard). Both are validated when set: every region must be
// registered in the global region registry (regions/<name>, written by the
// region's brokers when they start) and allowed by the tenant
// (allowed_regions; empty = every region). The list need not name the
// region the command is sent to: a region serving a namespace that does
// not list it still accepts writes and replicates them to the listed
// regions (ReplicationRegions adds the local region). Pulsar instead
// refuses a namespace whose cluster list leaves out the local cluster; we
// keep the simpler rule and let an operator add a region last.

// MaxReplicateTo caps Send.replicate_to (a producer's per-message targets).
const MaxReplicateTo = 16

// topicPolicyRecord is a topic's overrides in the global shard (JSON), or
// a prefix's policies (policies.go; never replication regions).
type topicPolicyRecord struct {
	// ReplicationRegions is the replication override; nil = none (an
	// empty list turns replication off for the topic).
	ReplicationRegions *[]string `json:"replication_regions,omitempty"`
	// Policies (protojson NamespacePolicies) holds the values of Fields.
	Policies json.RawMessage `json:"policies,omitempty"`
	// Fields lists the NamespacePolicies fields (proto names) the record
	// sets; the others inherit.
	Fields []string `json:"fields,omitempty"`
	// Permissions are the topic's grants, role -> actions (permissions.go);
	// a partitioned topic's cover its partitions.
	Permissions map[string][]string `json:"permissions,omitempty"`
}

// decodeTopicPolicyRecord decodes a stored topic or prefix policy record;
// callers name the key in the error.
func decodeTopicPolicyRecord(val []byte) (*topicPolicyRecord, error) {
	rec := &topicPolicyRecord{}
	if err := json.Unmarshal(val, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// ReplicationRegions returns the regions a topic replicates to: its
// topic-level override, else its namespace's replication_regions, limited
// to the tenant's allowed regions, plus the local region; nil when the
// topic does not replicate. It reads through the policy cache, so a region
// cut off from the global shard answers with the policies it last saw.
// The result is sorted and the caller's to keep.
func (s *Server) ReplicationRegions(ctx context.Context, name TopicName) ([]string, error) {
	pol, err := s.getPolicies(ctx, name.NamespaceName())
	if err != nil {
		return nil, err
	}
	regions := pol.GetReplicationRegions()
	ov, ok, err := s.topicOverride(ctx, name)
	if err != nil {
		return nil, err
	}
	if ok && ov.ReplicationRegions != nil {
		regions = *ov.ReplicationRegions
	}
	ten, err := s.getTenant(ctx, name.Tenant)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	out := make([]string, 0, len(regions)+1)
	for _, r := range regions {
		if len(ten.AllowedRegions) > 0 && !slices.Contains(ten.AllowedRegions, r) {
			continue
		}
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	if !slices.Contains(out, s.cfg.Region) {
		out = append(out, s.cfg.Region)
	}
	sort.Strings(out)
	return out, nil
}

// topicOverride reads a topic's replication override through the cache.
func (s *Server) topicOverride(ctx context.Context, name TopicName) (topicPolicyRecord, bool, error) {
	kv, err := s.policies.get(ctx, topicPolicyPrefix+name.String(), true)
	if errors.Is(err, metadata.ErrNotFound) {
		return topicPolicyRecord{}, false, nil
	}
	if err != nil {
		return topicPolicyRecord{}, false, fmt.Errorf("%w: read replication override of %s: %v", ErrUnavailable, name, err)
	}
	rec, err := decodeTopicPolicyRecord(kv.Value)
	if err != nil {
		return topicPolicyRecord{}, false, fmt.Errorf("broker: replication override of %s corrupt: %v", name, err)
	}
	return *rec, true, nil
}

// validateRegionList checks a replication region list's shape: the count,
// each name, no duplicates. field names the input in errors.
func validateRegionList(field string, regions []string) error {
	return validateList(field, "regions", regions, MaxReplicationRegions, ValidateName)
}

// checkRegionsAllowed validates a replication region list for namespace
// ns ("tenant/namespace"): its shape, every region registered in the
// global region registry, every region allowed by the tenant. The error
// names the first offending region.
func (s *Server) checkRegionsAllowed(ctx context.Context, ns, field string, regions []string) error {
	if err := validateRegionList(field, regions); err != nil {
		return err
	}
	if len(regions) == 0 {
		return nil
	}
	tenant, _, err := ParseNamespace(ns)
	if err != nil {
		return err
	}
	ten, err := s.getTenant(ctx, tenant)
	if err != nil {
		return err
	}
	for _, r := range regions {
		if len(ten.AllowedRegions) > 0 && !slices.Contains(ten.AllowedRegions, r) {
			return fmt.Errorf("%w: %s: region %q is not in tenant %s's allowed_regions [%s]", ErrInvalidArgument, field, r, tenant, strings.Join(ten.AllowedRegions, ","))
		}
		if _, err := s.policies.get(ctx, regionPrefix+r, false); err != nil {
			if errors.Is(err, metadata.ErrNotFound) {
				return fmt.Errorf("%w: %s: region %q is unknown (not in the global region registry; known: [%s])", ErrInvalidArgument, field, r, strings.Join(s.knownRegions(), ","))
			}
			return fmt.Errorf("%w: check region %q: %v", ErrUnavailable, r, err)
		}
	}
	return nil
}

// knownRegions lists the regions of the registry the cache holds.
func (s *Server) knownRegions() []string {
	s.policies.mu.Lock()
	defer s.policies.mu.Unlock()
	var out []string
	for k := range s.policies.keys {
		if name, ok := strings.CutPrefix(k, regionPrefix); ok {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func (a *adminService) SetNamespaceReplication(ctx context.Context, r *clientv1.SetNamespaceReplicationRequest) (*clientv1.SetNamespaceReplicationResponse, error) {
	ns := r.GetNamespace()
	if _, _, err := ParseNamespace(ns); err != nil {
		return nil, GRPCError(err)
	}
	if err := a.b.checkRegionsAllowed(ctx, ns, "regions", r.GetRegions()); err != nil {
		return nil, GRPCError(err)
	}
	// Read-modify-write of the one field, guarded by the version read.
	for attempt := 0; ; attempt++ {
		kv, err := a.b.cfg.Global.Get(ctx, namespacePrefix+ns, metadata.ReadOptions{})
		if errors.Is(err, metadata.ErrNotFound) {
			return nil, GRPCError(fmt.Errorf("%w: namespace %s does not exist", ErrNotFound, ns))
		}
		if err != nil {
			return nil, GRPCError(fmt.Errorf("%w: read namespace %s: %v", ErrUnavailable, ns, err))
		}
		p, err := parsePolicies(ns, kv.Value)
		if err != nil {
			return nil, GRPCError(err)
		}
		p.ReplicationRegions = append([]string(nil), r.GetRegions()...)
		val, _ := protojson.Marshal(p)
		nkv, err := a.b.cfg.Global.Put(ctx, namespacePrefix+ns, val, kv.Version, 0)
		if errors.Is(err, metadata.ErrVersionMismatch) && attempt < 5 {
			continue
		}
		if err != nil {
			return nil, GRPCError(fmt.Errorf("%w: write namespace %s: %v", ErrUnavailable, ns, err))
		}
		a.b.policies.learn(nkv)
		a.b.applyNamespacePolicies(ns, p)
		a.b.log.Info("namespace replication set", "namespace", ns, "regions", r.GetRegions())
		return &clientv1.SetNamespaceReplicationResponse{}, nil
	}
}

// applyNamespacePolicies gives the loaded topics of ns their new
// effective policies and starts or stops their replicators now rather
// than at the next reconcile tick.
func (s *Server) applyNamespacePolicies(ns string, _ *clientv1.NamespacePolicies) {
	s.policyChanged(namespacePrefix + ns)
}

// policyChanged is the policy cache's change hook: a new namespace policy,
// prefix policy or topic override reaches the loaded topics it concerns
// at once, as their new effective policies (also when it was changed
// while this region was cut off, as soon as the watch resumes). A
// replication change starts or stops their replicators.
func (s *Server) policyChanged(key string) {
	for _, t := range s.topicsUnder(key) {
		s.refreshTopicPolicies(t)
	}
}

func (a *adminService) GetNamespaceReplication(ctx context.Context, r *clientv1.GetNamespaceReplicationRequest) (*clientv1.GetNamespaceReplicationResponse, error) {
	ns := r.GetNamespace()
	if _, _, err := ParseNamespace(ns); err != nil {
		return nil, GRPCError(err)
	}
	kv, stale, err := a.b.policies.fresh(ctx, namespacePrefix+ns)
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, GRPCError(fmt.Errorf("%w: namespace %s does not exist", ErrNotFound, ns))
	}
	if err != nil {
		return nil, GRPCError(fmt.Errorf("%w: read namespace %s: %v", ErrUnavailable, ns, err))
	}
	p, err := parsePolicies(ns, kv.Value)
	if err != nil {
		return nil, GRPCError(err)
	}
	return &clientv1.GetNamespaceReplicationResponse{Regions: p.GetReplicationRegions(), Stale: stale}, nil
}

func (a *adminService) GetTenant(ctx context.Context, r *clientv1.GetTenantRequest) (*clientv1.TenantInfo, error) {
	if err := ValidateName("tenant", r.GetTenant()); err != nil {
		return nil, GRPCError(err)
	}
	kv, stale, err := a.b.policies.fresh(ctx, tenantPrefix+r.GetTenant())
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, GRPCError(fmt.Errorf("%w: tenant %s does not exist", ErrNotFound, r.GetTenant()))
	}
	if err != nil {
		return nil, GRPCError(fmt.Errorf("%w: read tenant %s: %v", ErrUnavailable, r.GetTenant(), err))
	}
	rec, err := parseTenant(r.GetTenant(), kv.Value)
	if err != nil {
		return nil, GRPCError(err)
	}
	return &clientv1.TenantInfo{Tenant: r.GetTenant(), AllowedRegions: rec.AllowedRegions, AdminRoles: rec.AdminRoles, Stale: stale}, nil
}

func (a *adminService) SetTenantAllowedRegions(ctx context.Context, r *clientv1.SetTenantAllowedRegionsRequest) (*clientv1.SetTenantAllowedRegionsResponse, error) {
	tenant := r.GetTenant()
	if err := ValidateName("tenant", tenant); err != nil {
		return nil, GRPCError(err)
	}
	allowed := r.GetAllowedRegions()
	if err := validateRegionList("allowed_regions", allowed); err != nil {
		return nil, GRPCError(err)
	}
	kv, err := a.b.cfg.Global.Get(ctx, tenantPrefix+tenant, metadata.ReadOptions{})
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
	if len(allowed) > 0 {
		// Refuse to strand a namespace or topic that replicates to a region
		// the new list leaves out: change those first.
		if err := a.b.checkTenantUses(ctx, tenant, allowed); err != nil {
			return nil, GRPCError(err)
		}
	}
	rec.AllowedRegions = append([]string(nil), allowed...)
	val, _ := json.Marshal(rec)
	nkv, err := a.b.cfg.Global.Put(ctx, tenantPrefix+tenant, val, kv.Version, 0)
	if errors.Is(err, metadata.ErrVersionMismatch) {
		return nil, GRPCError(fmt.Errorf("%w: tenant %s changed concurrently; retry", ErrUnavailable, tenant))
	}
	if err != nil {
		return nil, GRPCError(fmt.Errorf("%w: write tenant %s: %v", ErrUnavailable, tenant, err))
	}
	a.b.policies.learn(nkv)
	a.b.log.Info("tenant allowed regions set", "tenant", tenant, "allowed_regions", allowed)
	return &clientv1.SetTenantAllowedRegionsResponse{}, nil
}

// checkTenantUses fails when a namespace or topic override of tenant
// replicates to a region outside allowed.
func (s *Server) checkTenantUses(ctx context.Context, tenant string, allowed []string) error {
	outside := func(regions []string) string {
		for _, r := range regions {
			if !slices.Contains(allowed, r) {
				return r
			}
		}
		return ""
	}
	var ferr error
	err := listGlobal(ctx, s.cfg.Global, namespacePrefix+tenant+"/", func(kv metadata.KV) {
		ns := strings.TrimPrefix(kv.Key, namespacePrefix)
		p, err := parsePolicies(ns, kv.Value)
		if err == nil && ferr == nil {
			if r := outside(p.GetReplicationRegions()); r != "" {
				ferr = fmt.Errorf("%w: namespace %s replicates to region %q, which allowed_regions leaves out; change its replication first", ErrNotAllowed, ns, r)
			}
		}
	})
	if err == nil {
		err = listGlobal(ctx, s.cfg.Global, topicPolicyPrefix+tenant+"/", func(kv metadata.KV) {
			var rec topicPolicyRecord
			if json.Unmarshal(kv.Value, &rec) == nil && ferr == nil {
				if rec.ReplicationRegions == nil {
					return
				}
				if r := outside(*rec.ReplicationRegions); r != "" {
					ferr = fmt.Errorf("%w: topic %s replicates to region %q, which allowed_regions leaves out; change its replication first", ErrNotAllowed, strings.TrimPrefix(kv.Key, topicPolicyPrefix), r)
				}
			}
		})
	}
	if err != nil {
		return err
	}
	return ferr
}

func (a *adminService) SetTopicReplication(ctx context.Context, r *clientv1.SetTopicReplicationRequest) (*clientv1.SetTopicReplicationResponse, error) {
	name, err := ParseTopic(r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	if _, err := a.b.getPolicies(ctx, name.NamespaceName()); err != nil {
		return nil, GRPCError(err)
	}
	if err := a.b.checkRegionsAllowed(ctx, name.NamespaceName(), "regions", r.GetRegions()); err != nil {
		return nil, GRPCError(err)
	}
	regions := append([]string{}, r.GetRegions()...)
	// The record also holds the topic's policy fields (policies.go): keep them.
	err = a.b.updatePolicyRecord(ctx, topicPolicyPrefix+name.String(), func(rec *topicPolicyRecord, _ bool) error {
		rec.ReplicationRegions = &regions
		return nil
	})
	if err != nil {
		return nil, GRPCError(fmt.Errorf("write replication override of %s: %w", name, err))
	}
	a.b.log.Info("topic replication override set", "topic", name.String(), "regions", r.GetRegions())
	return &clientv1.SetTopicReplicationResponse{}, nil
}

func (a *adminService) GetTopicReplication(ctx context.Context, r *clientv1.GetTopicReplicationRequest) (*clientv1.GetTopicReplicationResponse, error) {
	name, err := ParseTopic(r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	if _, err := a.b.getPolicies(ctx, name.NamespaceName()); err != nil {
		return nil, GRPCError(err)
	}
	resp := &clientv1.GetTopicReplicationResponse{}
	kv, stale, err := a.b.policies.fresh(ctx, topicPolicyPrefix+name.String())
	switch {
	case err == nil:
		rec, err := decodeTopicPolicyRecord(kv.Value)
		if err != nil {
			return nil, GRPCError(fmt.Errorf("broker: replication override of %s corrupt: %v", name, err))
		}
		if rec.ReplicationRegions != nil {
			resp.HasOverride, resp.OverrideRegions = true, *rec.ReplicationRegions
		}
	case !errors.Is(err, metadata.ErrNotFound):
		return nil, GRPCError(fmt.Errorf("%w: read replication override of %s: %v", ErrUnavailable, name, err))
	}
	resp.Stale = stale
	eff, err := a.b.ReplicationRegions(ctx, name)
	if err != nil {
		return nil, GRPCError(err)
	}
	resp.EffectiveRegions = eff
	return resp, nil
}

func (a *adminService) RemoveTopicReplication(ctx context.Context, r *clientv1.RemoveTopicReplicationRequest) (*clientv1.RemoveTopicReplicationResponse, error) {
	name, err := ParseTopic(r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	// The record may also hold policy fields (policies.go): it is deleted
	// only when nothing is left in it.
	err = a.b.updatePolicyRecord(ctx, topicPolicyPrefix+name.String(), func(rec *topicPolicyRecord, _ bool) error {
		if rec.ReplicationRegions == nil {
			return fmt.Errorf("%w: topic %s has no replication override", ErrNotFound, name)
		}
		rec.ReplicationRegions = nil
		return nil
	})
	if err != nil {
		return nil, GRPCError(err)
	}
	a.b.log.Info("topic replication override removed", "topic", name.String())
	return &clientv1.RemoveTopicReplicationResponse{}, nil
}

// checkSendReplication validates a Send's replication options against the
// topic's replication regions: replicate_to names at most MaxReplicateTo
// valid regions, each one the topic replicates to, and is not combined
// with disable_replication.
func (s *Server) checkSendReplication(ctx context.Context, name TopicName, sd *clientv1.Send) error {
	to := sd.GetReplicateTo()
	if len(to) == 0 {
		return nil
	}
	if sd.GetDisableReplication() {
		return fmt.Errorf("%w: replicate_to and disable_replication are exclusive", ErrInvalidArgument)
	}
	if len(to) > MaxReplicateTo {
		return fmt.Errorf("%w: replicate_to has %d regions, limit %d", ErrInvalidArgument, len(to), MaxReplicateTo)
	}
	for i, r := range to {
		if err := ValidateName(fmt.Sprintf("replicate_to[%d]", i), r); err != nil {
			return err
		}
	}
	regions, err := s.ReplicationRegions(ctx, name)
	if err != nil {
		return err
	}
	for _, r := range to {
		if !slices.Contains(regions, r) {
			// The text leaves out the topic: the client reads "topic" or
			// "name" in an INVALID_ARGUMENT message as a bad name.
			return fmt.Errorf("%w: replicate_to region %q is not one of the replication regions [%s]", ErrInvalidArgument, r, strings.Join(regions, ","))
		}
	}
	return nil
}

// listGlobal calls fn for every key with prefix in store, page by page.
func listGlobal(ctx context.Context, store metadata.Store, prefix string, fn func(metadata.KV)) error {
	page := metadata.Page{}
	for {
		res, err := store.List(ctx, prefix, page, metadata.ReadOptions{})
		if err != nil {
			return fmt.Errorf("%w: list %s: %v", ErrUnavailable, prefix, err)
		}
		for _, kv := range res.KVs {
			fn(kv)
		}
		if !res.More || len(res.KVs) == 0 {
			return nil
		}
		page.After = res.KVs[len(res.KVs)-1].Key
	}
}

// addReplicationAdminRoutes adds the replication policy and region admin
// methods to the JSON admin API.
func addReplicationAdminRoutes(routes map[string]adminRoute, a *adminService) {
	routes["SetNamespaceReplication"] = route(func() *clientv1.SetNamespaceReplicationRequest { return &clientv1.SetNamespaceReplicationRequest{} }, a.SetNamespaceReplication)
	routes["GetNamespaceReplication"] = route(func() *clientv1.GetNamespaceReplicationRequest { return &clientv1.GetNamespaceReplicationRequest{} }, a.GetNamespaceReplication)
	routes["GetTenant"] = route(func() *clientv1.GetTenantRequest { return &clientv1.GetTenantRequest{} }, a.GetTenant)
	routes["SetTenantAllowedRegions"] = route(func() *clientv1.SetTenantAllowedRegionsRequest { return &clientv1.SetTenantAllowedRegionsRequest{} }, a.SetTenantAllowedRegions)
	routes["SetTopicReplication"] = route(func() *clientv1.SetTopicReplicationRequest { return &clientv1.SetTopicReplicationRequest{} }, a.SetTopicReplication)
	routes["GetTopicReplication"] = route(func() *clientv1.GetTopicReplicationRequest { return &clientv1.GetTopicReplicationRequest{} }, a.GetTopicReplication)
	routes["RemoveTopicReplication"] = route(func() *clientv1.RemoveTopicReplicationRequest { return &clientv1.RemoveTopicReplicationRequest{} }, a.RemoveTopicReplication)
	routes["ListRegions"] = route(func() *clientv1.ListRegionsRequest { return &clientv1.ListRegionsRequest{} }, a.ListRegions)
}
