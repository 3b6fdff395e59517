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
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Effective policies (issue 10).
//
// A topic runs with its namespace's policies, overlaid by the policies of
// every topic-name prefix it falls under (from the shortest to the
// longest, so the longest prefix wins for a field several of them set),
// overlaid by the topic's own override. An overlay sets only the fields it
// names; the others inherit. Prefix and topic records live in the global
// shard and are mirrored by the policy cache, whose change hook gives the
// loaded topics their new effective policies at once: t.policies (and so
// t.currentPolicies()) is always the effective policy.

// prefixPolicyPrefix + "tenant/namespace/seg/..." (the prefix without its
// trailing '/') holds a prefix's policies (topicPolicyRecord without
// replication regions, JSON) in the global shard.
const prefixPolicyPrefix = "prefix-policies/"

// policyFieldsDesc describes NamespacePolicies for the overlay code.
var policyFieldsDesc = (&clientv1.NamespacePolicies{}).ProtoReflect().Descriptor().Fields()

// overridableFields lists the NamespacePolicies fields a prefix or topic
// may set: all but replication_regions (SetTopicReplication sets a topic's)
// and the grants (GrantPermission sets them).
func overridableFields() []string {
	var out []string
	for i := 0; i < policyFieldsDesc.Len(); i++ {
		if n := string(policyFieldsDesc.Get(i).Name()); n != "replication_regions" && n != "permissions" && n != "prefix_permissions" {
			out = append(out, n)
		}
	}
	return out
}

// checkPolicyFields validates field names; the error names the bad one and
// lists the allowed ones.
func checkPolicyFields(fields []string) error {
	allowed := overridableFields()
	for i, f := range fields {
		if !slices.Contains(allowed, f) {
			return fmt.Errorf("%w: fields[%d] %q is not a policy a prefix or topic may set; allowed: %s", ErrInvalidArgument, i, f, strings.Join(allowed, ", "))
		}
		if slices.Contains(fields[:i], f) {
			return fmt.Errorf("%w: fields names %q twice", ErrInvalidArgument, f)
		}
	}
	return nil
}

// populatedFields lists the fields p sets (proto names), for a request
// that names none.
func populatedFields(p *clientv1.NamespacePolicies) []string {
	var out []string
	p.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		out = append(out, string(fd.Name()))
		return true
	})
	return out
}

// overlay copies the named fields of src into dst: a field src leaves at
// its zero value (or unset, for optional fields) is cleared in dst, since
// the overlay sets it to that.
func overlay(dst, src *clientv1.NamespacePolicies, fields []string) {
	d, s := dst.ProtoReflect(), src.ProtoReflect()
	for _, f := range fields {
		fd := policyFieldsDesc.ByName(protoreflect.Name(f))
		if fd == nil {
			continue
		}
		if s.Has(fd) {
			if fd.IsList() {
				l := d.NewField(fd).List()
				sl := s.Get(fd).List()
				for i := 0; i < sl.Len(); i++ {
					l.Append(sl.Get(i))
				}
				d.Set(fd, protoreflect.ValueOfList(l))
			} else {
				d.Set(fd, s.Get(fd))
			}
		} else {
			d.Clear(fd)
		}
	}
}

// recordPolicies decodes the policies of a prefix or topic record.
func (r *topicPolicyRecord) policies() (*clientv1.NamespacePolicies, error) {
	p := &clientv1.NamespacePolicies{}
	if len(r.Policies) == 0 {
		return p, nil
	}
	if err := protojson.Unmarshal(r.Policies, p); err != nil {
		return nil, err
	}
	return p, nil
}

// setPolicies merges fields of p into the record.
func (r *topicPolicyRecord) setPolicies(p *clientv1.NamespacePolicies, fields []string) error {
	cur, err := r.policies()
	if err != nil {
		return err
	}
	overlay(cur, p, fields)
	for _, f := range fields {
		if !slices.Contains(r.Fields, f) {
			r.Fields = append(r.Fields, f)
		}
	}
	sort.Strings(r.Fields)
	return r.encode(cur)
}

// removePolicies drops fields (all when empty); it reports whether the
// record set any of them.
func (r *topicPolicyRecord) removePolicies(fields []string) (bool, error) {
	if len(fields) == 0 {
		had := len(r.Fields) > 0
		r.Fields, r.Policies = nil, nil
		return had, nil
	}
	cur, err := r.policies()
	if err != nil {
		return false, err
	}
	had := false
	for _, f := range fields {
		if i := slices.Index(r.Fields, f); i >= 0 {
			had = true
			r.Fields = slices.Delete(r.Fields, i, i+1)
			overlay(cur, &clientv1.NamespacePolicies{}, []string{f})
		}
	}
	return had, r.encode(cur)
}

func (r *topicPolicyRecord) encode(p *clientv1.NamespacePolicies) error {
	if len(r.Fields) == 0 {
		r.Fields, r.Policies = nil, nil
		return nil
	}
	b, err := protojson.Marshal(p)
	if err != nil {
		return err
	}
	r.Policies = b
	return nil
}

// empty reports whether the record overrides nothing (it is deleted).
func (r *topicPolicyRecord) empty() bool {
	return r.ReplicationRegions == nil && len(r.Fields) == 0 && len(r.Permissions) == 0
}

// policyChain lists the global keys whose records overlay the namespace
// policies of a topic (topic = true) or of a prefix, shortest first. rel
// is the name below the namespace (a prefix without its trailing '/').
func policyChain(ns, rel string, topic bool) []string {
	segs := strings.Split(rel, "/")
	n := len(segs)
	if topic {
		n--
	}
	keys := make([]string, 0, n+1)
	for i := 1; i <= n; i++ {
		keys = append(keys, prefixPolicyPrefix+ns+"/"+strings.Join(segs[:i], "/"))
	}
	if topic {
		if base, ok := partitionBase(rel); ok {
			// A partition inherits its partitioned topic's override (as
			// Pulsar's topic policies do), then its own applies.
			keys = append(keys, topicPolicyPrefix+ns+"/"+base)
		}
		keys = append(keys, topicPolicyPrefix+ns+"/"+rel)
	}
	return keys
}

// partitionBase returns the partitioned topic of a partition's topic part
// ("x/y-partition-3" → "x/y").
func partitionBase(rel string) (string, bool) {
	last := rel[strings.LastIndex(rel, "/")+1:]
	if !isPartitionName(last) {
		return "", false
	}
	return rel[:strings.LastIndex(rel, PartitionSuffix)], true
}

// sourceOf names where a chain key's fields come from.
func sourceOf(key string) string {
	if rest, ok := strings.CutPrefix(key, prefixPolicyPrefix); ok {
		return "prefix:" + rest + "/"
	}
	return "topic"
}

// readPolicyRecord reads a prefix or topic record through the policy cache
// (a missing one costs no global read once its prefix was listed).
func (s *Server) readPolicyRecord(ctx context.Context, key string) (*topicPolicyRecord, error) {
	kv, err := s.policies.get(ctx, key, true)
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %v", ErrUnavailable, key, err)
	}
	rec, err := decodeTopicPolicyRecord(kv.Value)
	if err != nil {
		return nil, fmt.Errorf("broker: policy record %s corrupt: %v", key, err)
	}
	return rec, nil
}

// resolvePolicies overlays ns's policies with the records of keys in
// order; pending replaces the stored record of a key (nil = none), for
// validating a change before it is written. It returns the result and,
// per field set by a record, its source.
func (s *Server) resolvePolicies(ctx context.Context, ns string, keys []string, pending map[string]*topicPolicyRecord) (*clientv1.NamespacePolicies, map[string]string, error) {
	base, err := s.getPolicies(ctx, ns)
	if err != nil {
		return nil, nil, err
	}
	return s.resolveFrom(ctx, base, keys, pending)
}

// resolveFrom is resolvePolicies from the namespace policies base.
func (s *Server) resolveFrom(ctx context.Context, base *clientv1.NamespacePolicies, keys []string, pending map[string]*topicPolicyRecord) (*clientv1.NamespacePolicies, map[string]string, error) {
	var err error
	eff := proto.Clone(base).(*clientv1.NamespacePolicies)
	sources := map[string]string{}
	for _, k := range keys {
		rec, ok := pending[k]
		if !ok {
			rec, err = s.readPolicyRecord(ctx, k)
			if err != nil {
				if errors.Is(err, ErrUnavailable) {
					return nil, nil, err
				}
				// Written validated by a broker: a corrupt one was changed
				// by hand. Topics keep running with the levels around it.
				s.log.Warn("policy record corrupt; ignored", "key", k, "err", err)
				continue
			}
		}
		if rec == nil || len(rec.Fields) == 0 {
			continue
		}
		p, err := rec.policies()
		if err != nil {
			s.log.Warn("policy record corrupt; ignored", "key", k, "err", err)
			continue
		}
		overlay(eff, p, rec.Fields)
		for _, f := range rec.Fields {
			sources[f] = sourceOf(k)
		}
	}
	return eff, sources, nil
}

// effectivePolicies returns the policies topic name runs with.
func (s *Server) effectivePolicies(ctx context.Context, name TopicName) (*clientv1.NamespacePolicies, error) {
	p, _, err := s.resolvePolicies(ctx, name.NamespaceName(), policyChain(name.NamespaceName(), name.Topic, true), nil)
	return p, err
}

// refreshTopicPolicies gives a loaded topic its current effective policies
// and starts or stops its replicators (the change may be one of
// replication regions).
func (s *Server) refreshTopicPolicies(t *topic) {
	ctx, cancel := context.WithTimeout(context.Background(), policyFreshTimeout)
	defer cancel()
	p, err := s.effectivePolicies(ctx, t.name)
	if err != nil {
		t.log.Warn("policies not refreshed; the topic keeps its previous ones", "err", err)
		return
	}
	t.setPolicies(p)
	if s.repl != nil {
		go s.repl.sync(t)
	}
}

// topicsUnder returns the loaded topics a changed policy key concerns.
func (s *Server) topicsUnder(key string) []*topic {
	var match func(TopicName) bool
	switch {
	case strings.HasPrefix(key, namespacePrefix):
		ns := key[len(namespacePrefix):]
		match = func(n TopicName) bool { return n.NamespaceName() == ns }
	case strings.HasPrefix(key, prefixPolicyPrefix):
		p := key[len(prefixPolicyPrefix):] + "/"
		match = func(n TopicName) bool { return strings.HasPrefix(n.String(), p) }
	case strings.HasPrefix(key, topicPolicyPrefix):
		tn := key[len(topicPolicyPrefix):]
		match = func(n TopicName) bool {
			if n.String() == tn {
				return true
			}
			base, ok := partitionBase(n.Topic)
			return ok && n.NamespaceName()+"/"+base == tn
		}
	default:
		return nil
	}
	var out []*topic
	for _, t := range s.loadedTopics() {
		if match(t.name) {
			out = append(out, t)
		}
	}
	return out
}

// dedupEnabled reports whether producer deduplication is on for the topic
// (the effective deduplication_enabled; unset = on).
func (t *topic) dedupEnabled() bool {
	p := t.currentPolicies()
	return p == nil || p.DeduplicationEnabled == nil || *p.DeduplicationEnabled
}

// updatePolicyRecord applies fn to the record at key (nil record when
// absent) and writes the result, deleting the key when the record is left
// empty; a concurrent change makes it read and apply again. Then this
// broker's loaded topics get their new policies (other brokers' through
// the policy cache's watch).
func (s *Server) updatePolicyRecord(ctx context.Context, key string, fn func(rec *topicPolicyRecord, exists bool) error) error {
	for attempt := 0; ; attempt++ {
		rec := &topicPolicyRecord{}
		version := metadata.MustNotExist
		kv, err := s.cfg.Global.Get(ctx, key, metadata.ReadOptions{})
		switch {
		case err == nil:
			if rec, err = decodeTopicPolicyRecord(kv.Value); err != nil {
				return fmt.Errorf("broker: policy record %s corrupt: %v", key, err)
			}
			version = kv.Version
		case !errors.Is(err, metadata.ErrNotFound):
			return fmt.Errorf("%w: read %s: %v", ErrUnavailable, key, err)
		}
		exists := err == nil
		if err := fn(rec, exists); err != nil {
			return err
		}
		if rec.empty() {
			if !exists {
				return nil
			}
			err = s.cfg.Global.Delete(ctx, key, version)
			if err == nil || errors.Is(err, metadata.ErrNotFound) {
				s.policies.forget(key)
				s.policyChanged(key)
				return nil
			}
		} else {
			val, merr := json.Marshal(rec)
			if merr != nil {
				return fmt.Errorf("broker: encode %s: %v", key, merr)
			}
			var nkv metadata.KV
			nkv, err = s.cfg.Global.Put(ctx, key, val, version, 0)
			if err == nil {
				s.policies.learn(nkv)
				s.policyChanged(key)
				return nil
			}
		}
		if errors.Is(err, metadata.ErrVersionMismatch) && attempt < 5 {
			continue
		}
		if errors.Is(err, metadata.ErrVersionMismatch) {
			return fmt.Errorf("%w: %s changed concurrently; retry", ErrUnavailable, key)
		}
		return fmt.Errorf("%w: write %s: %v", ErrUnavailable, key, err)
	}
}

// policyRequestFields returns the fields a set request names (or the ones
// its policies populate), validated.
func policyRequestFields(p *clientv1.NamespacePolicies, fields []string) ([]string, error) {
	if p == nil {
		p = &clientv1.NamespacePolicies{}
	}
	if len(fields) == 0 {
		fields = populatedFields(p)
		if i := slices.Index(fields, "replication_regions"); i >= 0 {
			return nil, fmt.Errorf("%w: policies.replication_regions cannot be set here; use the replication override (SetTopicReplication)", ErrInvalidArgument)
		}
		if len(fields) == 0 {
			return nil, fmt.Errorf("%w: policies sets no field and fields is empty; name the fields to set", ErrInvalidArgument)
		}
	}
	if err := checkPolicyFields(fields); err != nil {
		return nil, err
	}
	return fields, nil
}

// setOverlay validates and writes a set request for the record at key,
// the last of chain.
func (s *Server) setOverlay(ctx context.Context, ns string, chain []string, p *clientv1.NamespacePolicies, fields []string) error {
	if p == nil {
		p = &clientv1.NamespacePolicies{}
	}
	fields, err := policyRequestFields(p, fields)
	if err != nil {
		return err
	}
	if slices.Contains(fields, "max_replication_lag_regions") {
		if err := s.checkRegionsAllowed(ctx, ns, "max_replication_lag_regions", p.GetMaxReplicationLagRegions()); err != nil {
			return err
		}
	}
	key := chain[len(chain)-1]
	return s.updatePolicyRecord(ctx, key, func(rec *topicPolicyRecord, _ bool) error {
		if err := rec.setPolicies(p, fields); err != nil {
			return fmt.Errorf("broker: policy record %s corrupt: %v", key, err)
		}
		// Validated as the policies the topic (or a topic right under the
		// prefix) would run with; nothing is written when they are invalid.
		pending := map[string]*topicPolicyRecord{key: rec}
		eff, _, err := s.resolvePolicies(ctx, ns, chain, pending)
		if err != nil {
			return err
		}
		if err := s.validatePolicies(eff); err != nil {
			return err
		}
		if rel, ok := strings.CutPrefix(key, prefixPolicyPrefix+ns+"/"); ok {
			// The deeper prefixes and topic overrides resolve through it.
			base, err := s.getPolicies(ctx, ns)
			if err != nil {
				return err
			}
			return s.checkOverlaysUnder(ctx, ns, rel+"/", base, pending)
		}
		return nil
	})
}

// checkOverlaysUnder validates the effective policies of every prefix and
// topic override of ns below under ("" = all, else "seg/.../") as they
// would be with the namespace policies base and the pending records: a
// change of a namespace or a prefix must not make a deeper level invalid
// (say a topic's write_quorum above a lowered ensemble_size). It reads the
// policy cache's mirror of the records.
func (s *Server) checkOverlaysUnder(ctx context.Context, ns, under string, base *clientv1.NamespacePolicies, pending map[string]*topicPolicyRecord) error {
	type level struct {
		key, rel string
		topic    bool
	}
	var levels []level
	s.policies.mu.Lock()
	for k := range s.policies.keys {
		for _, p := range []string{prefixPolicyPrefix, topicPolicyPrefix} {
			if rel, ok := strings.CutPrefix(k, p+ns+"/"); ok && strings.HasPrefix(rel, under) {
				levels = append(levels, level{k, rel, p == topicPolicyPrefix})
			}
		}
	}
	s.policies.mu.Unlock()
	sort.Slice(levels, func(i, j int) bool { return levels[i].key < levels[j].key })
	for _, l := range levels {
		eff, _, err := s.resolveFrom(ctx, base, policyChain(ns, l.rel, l.topic), pending)
		if err != nil {
			return err
		}
		if err := s.validatePolicies(eff); err != nil {
			what := "prefix " + ns + "/" + l.rel + "/"
			if l.topic {
				what = "topic " + ns + "/" + l.rel
			}
			return fmt.Errorf("%w (with the policies of %s, which this change would make invalid: change or remove them first)", err, what)
		}
	}
	return nil
}

// removeOverlay removes fields (all when empty) of the record at key.
func (s *Server) removeOverlay(ctx context.Context, key, what string, fields []string) error {
	if err := checkPolicyFields(fields); err != nil {
		return err
	}
	return s.updatePolicyRecord(ctx, key, func(rec *topicPolicyRecord, exists bool) error {
		had, err := rec.removePolicies(fields)
		if err != nil {
			return fmt.Errorf("broker: policy record %s corrupt: %v", key, err)
		}
		if !exists || !had {
			return fmt.Errorf("%w: %s has no policy override%s", ErrNotFound, what, fieldList(fields))
		}
		return nil
	})
}

func fieldList(fields []string) string {
	if len(fields) == 0 {
		return ""
	}
	return " for " + strings.Join(fields, ", ")
}

// deleteNamespaceOverlays deletes the prefix policies and topic overrides
// of a deleted namespace, so that a namespace created again under the
// name starts clean. Best effort: a failure is logged (the records are
// inert without their namespace).
func (s *Server) deleteNamespaceOverlays(ctx context.Context, ns string) {
	for _, p := range []string{prefixPolicyPrefix, topicPolicyPrefix} {
		var keys []metadata.KV
		err := listGlobal(ctx, s.cfg.Global, p+ns+"/", func(kv metadata.KV) { keys = append(keys, kv) })
		for _, kv := range keys {
			if derr := s.cfg.Global.Delete(ctx, kv.Key, kv.Version); derr != nil && !errors.Is(derr, metadata.ErrNotFound) {
				err = errors.Join(err, derr)
				continue
			}
			s.policies.forget(kv.Key)
		}
		if err != nil {
			s.log.Warn("policy records of a deleted namespace left behind", "namespace", ns, "err", err)
		}
	}
}

// ---- admin RPCs ----

func (a *adminService) SetTopicPolicies(ctx context.Context, r *clientv1.SetTopicPoliciesRequest) (*clientv1.SetTopicPoliciesResponse, error) {
	name, err := ParseTopic(r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	ns := name.NamespaceName()
	if err := a.b.setOverlay(ctx, ns, policyChain(ns, name.Topic, true), r.GetPolicies(), r.GetFields()); err != nil {
		return nil, GRPCError(err)
	}
	a.b.log.Info("topic policies set", "topic", name.String(), "fields", r.GetFields())
	return &clientv1.SetTopicPoliciesResponse{}, nil
}

func (a *adminService) GetTopicPolicies(ctx context.Context, r *clientv1.GetTopicPoliciesRequest) (*clientv1.GetTopicPoliciesResponse, error) {
	name, err := ParseTopic(r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	if _, err := a.b.getPolicies(ctx, name.NamespaceName()); err != nil {
		return nil, GRPCError(err)
	}
	resp := &clientv1.GetTopicPoliciesResponse{Policies: &clientv1.NamespacePolicies{}}
	kv, stale, err := a.b.policies.fresh(ctx, topicPolicyPrefix+name.String())
	resp.Stale = stale
	switch {
	case errors.Is(err, metadata.ErrNotFound):
		return resp, nil
	case err != nil:
		return nil, GRPCError(fmt.Errorf("%w: read policies of %s: %v", ErrUnavailable, name, err))
	}
	rec, err := decodeTopicPolicyRecord(kv.Value)
	if err != nil {
		return nil, GRPCError(fmt.Errorf("broker: policies of %s corrupt: %v", name, err))
	}
	if resp.Policies, err = rec.policies(); err != nil {
		return nil, GRPCError(fmt.Errorf("broker: policies of %s corrupt: %v", name, err))
	}
	resp.Fields = rec.Fields
	return resp, nil
}

func (a *adminService) RemoveTopicPolicies(ctx context.Context, r *clientv1.RemoveTopicPoliciesRequest) (*clientv1.RemoveTopicPoliciesResponse, error) {
	name, err := ParseTopic(r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	if err := a.b.removeOverlay(ctx, topicPolicyPrefix+name.String(), "topic "+name.String(), r.GetFields()); err != nil {
		return nil, GRPCError(err)
	}
	a.b.log.Info("topic policies removed", "topic", name.String(), "fields", r.GetFields())
	return &clientv1.RemoveTopicPoliciesResponse{}, nil
}

func (a *adminService) SetPrefixPolicies(ctx context.Context, r *clientv1.SetPrefixPoliciesRequest) (*clientv1.SetPrefixPoliciesResponse, error) {
	ns, rel, err := ParsePrefix(r.GetPrefix())
	if err != nil {
		return nil, GRPCError(err)
	}
	if err := a.b.setOverlay(ctx, ns, policyChain(ns, rel, false), r.GetPolicies(), r.GetFields()); err != nil {
		return nil, GRPCError(err)
	}
	a.b.log.Info("prefix policies set", "prefix", r.GetPrefix(), "fields", r.GetFields())
	return &clientv1.SetPrefixPoliciesResponse{}, nil
}

func (a *adminService) ListPrefixPolicies(ctx context.Context, r *clientv1.ListPrefixPoliciesRequest) (*clientv1.ListPrefixPoliciesResponse, error) {
	ns := r.GetNamespace()
	if _, _, err := ParseNamespace(ns); err != nil {
		return nil, GRPCError(err)
	}
	if _, err := a.b.getPolicies(ctx, ns); err != nil {
		return nil, GRPCError(err)
	}
	kvs, stale, err := a.b.policies.listFresh(ctx, prefixPolicyPrefix+ns+"/")
	if err != nil {
		return nil, GRPCError(fmt.Errorf("%w: list prefix policies of %s: %v", ErrUnavailable, ns, err))
	}
	resp := &clientv1.ListPrefixPoliciesResponse{Stale: stale}
	for _, kv := range kvs {
		rec, err := decodeTopicPolicyRecord(kv.Value)
		if err != nil {
			return nil, GRPCError(fmt.Errorf("broker: policy record %s corrupt: %v", kv.Key, err))
		}
		p, err := rec.policies()
		if err != nil {
			return nil, GRPCError(fmt.Errorf("broker: policy record %s corrupt: %v", kv.Key, err))
		}
		resp.Prefixes = append(resp.Prefixes, &clientv1.PrefixPolicies{Prefix: kv.Key[len(prefixPolicyPrefix):] + "/", Policies: p, Fields: rec.Fields})
	}
	sort.Slice(resp.Prefixes, func(i, j int) bool { return resp.Prefixes[i].Prefix < resp.Prefixes[j].Prefix })
	return resp, nil
}

func (a *adminService) RemovePrefixPolicies(ctx context.Context, r *clientv1.RemovePrefixPoliciesRequest) (*clientv1.RemovePrefixPoliciesResponse, error) {
	ns, rel, err := ParsePrefix(r.GetPrefix())
	if err != nil {
		return nil, GRPCError(err)
	}
	if err := a.b.removeOverlay(ctx, prefixPolicyPrefix+ns+"/"+rel, "prefix "+r.GetPrefix(), r.GetFields()); err != nil {
		return nil, GRPCError(err)
	}
	a.b.log.Info("prefix policies removed", "prefix", r.GetPrefix(), "fields", r.GetFields())
	return &clientv1.RemovePrefixPoliciesResponse{}, nil
}

func (a *adminService) GetEffectivePolicies(ctx context.Context, r *clientv1.GetEffectivePoliciesRequest) (*clientv1.GetEffectivePoliciesResponse, error) {
	name, err := ParseTopic(r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	ns := name.NamespaceName()
	p, src, err := a.b.resolvePolicies(ctx, ns, policyChain(ns, name.Topic, true), nil)
	if err != nil {
		return nil, GRPCError(err)
	}
	regions, err := a.b.ReplicationRegions(ctx, name)
	if err != nil {
		return nil, GRPCError(err)
	}
	return &clientv1.GetEffectivePoliciesResponse{Policies: p, Sources: src, ReplicationRegions: regions}, nil
}

// addPolicyAdminRoutes adds the prefix and topic policy methods to the
// JSON admin API.
func addPolicyAdminRoutes(routes map[string]adminRoute, a *adminService) {
	routes["SetTopicPolicies"] = route(func() *clientv1.SetTopicPoliciesRequest { return &clientv1.SetTopicPoliciesRequest{} }, a.SetTopicPolicies)
	routes["GetTopicPolicies"] = route(func() *clientv1.GetTopicPoliciesRequest { return &clientv1.GetTopicPoliciesRequest{} }, a.GetTopicPolicies)
	routes["RemoveTopicPolicies"] = route(func() *clientv1.RemoveTopicPoliciesRequest { return &clientv1.RemoveTopicPoliciesRequest{} }, a.RemoveTopicPolicies)
	routes["SetPrefixPolicies"] = route(func() *clientv1.SetPrefixPoliciesRequest { return &clientv1.SetPrefixPoliciesRequest{} }, a.SetPrefixPolicies)
	routes["ListPrefixPolicies"] = route(func() *clientv1.ListPrefixPoliciesRequest { return &clientv1.ListPrefixPoliciesRequest{} }, a.ListPrefixPolicies)
	routes["RemovePrefixPolicies"] = route(func() *clientv1.RemovePrefixPoliciesRequest { return &clientv1.RemovePrefixPoliciesRequest{} }, a.RemovePrefixPolicies)
	routes["GetEffectivePolicies"] = route(func() *clientv1.GetEffectivePoliciesRequest { return &clientv1.GetEffectivePoliciesRequest{} }, a.GetEffectivePolicies)
}
