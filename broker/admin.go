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
	"github.com/meridianmq/meridian/bookie/autorecovery"
	"github.com/meridianmq/meridian/metadata"
	"google.golang.org/protobuf/encoding/protojson"
)

// adminService implements clientv1.AdminServer.
type adminService struct {
	clientv1.UnimplementedAdminServer
	b *Server
}

func (a *adminService) ListTenants(ctx context.Context, _ *clientv1.ListTenantsRequest) (*clientv1.ListTenantsResponse, error) {
	ts, err := listKeys(ctx, a.b.cfg.Global, tenantPrefix)
	if err != nil {
		return nil, GRPCError(err)
	}
	return &clientv1.ListTenantsResponse{Tenants: ts}, nil
}

func (a *adminService) CreateTenant(ctx context.Context, r *clientv1.CreateTenantRequest) (*clientv1.CreateTenantResponse, error) {
	return &clientv1.CreateTenantResponse{}, GRPCError(a.b.createTenant(ctx, r.GetTenant(), r.GetAllowedRegions(), r.GetAdminRoles()))
}

func (a *adminService) DeleteTenant(ctx context.Context, r *clientv1.DeleteTenantRequest) (*clientv1.DeleteTenantResponse, error) {
	if err := ValidateName("tenant", r.GetTenant()); err != nil {
		return nil, GRPCError(err)
	}
	nss, err := listKeys(ctx, a.b.cfg.Global, namespacePrefix+r.GetTenant()+"/")
	if err != nil {
		return nil, GRPCError(err)
	}
	if len(nss) > 0 {
		return nil, GRPCError(fmt.Errorf("%w: tenant %s has %d namespaces; delete them first", ErrNotAllowed, r.GetTenant(), len(nss)))
	}
	if err := a.b.cfg.Global.Delete(ctx, tenantPrefix+r.GetTenant(), metadata.AnyVersion); err != nil {
		if errors.Is(err, metadata.ErrNotFound) {
			a.b.policies.forget(tenantPrefix + r.GetTenant())
			return nil, GRPCError(fmt.Errorf("%w: tenant %s", ErrNotFound, r.GetTenant()))
		}
		return nil, GRPCError(fmt.Errorf("%w: %v", ErrUnavailable, err))
	}
	a.b.policies.forget(tenantPrefix + r.GetTenant())
	return &clientv1.DeleteTenantResponse{}, nil
}

func (a *adminService) ListNamespaces(ctx context.Context, r *clientv1.ListNamespacesRequest) (*clientv1.ListNamespacesResponse, error) {
	if err := ValidateName("tenant", r.GetTenant()); err != nil {
		return nil, GRPCError(err)
	}
	if _, err := a.b.cfg.Global.Get(ctx, tenantPrefix+r.GetTenant(), metadata.ReadOptions{}); errors.Is(err, metadata.ErrNotFound) {
		return nil, GRPCError(fmt.Errorf("%w: tenant %s", ErrNotFound, r.GetTenant()))
	}
	nss, err := listKeys(ctx, a.b.cfg.Global, namespacePrefix+r.GetTenant()+"/")
	if err != nil {
		return nil, GRPCError(err)
	}
	for i := range nss {
		nss[i] = r.GetTenant() + "/" + nss[i]
	}
	return &clientv1.ListNamespacesResponse{Namespaces: nss}, nil
}

func (a *adminService) CreateNamespace(ctx context.Context, r *clientv1.CreateNamespaceRequest) (*clientv1.CreateNamespaceResponse, error) {
	return &clientv1.CreateNamespaceResponse{}, GRPCError(a.b.createNamespace(ctx, r.GetNamespace(), r.GetPolicies()))
}

func (a *adminService) DeleteNamespace(ctx context.Context, r *clientv1.DeleteNamespaceRequest) (*clientv1.DeleteNamespaceResponse, error) {
	if _, _, err := ParseNamespace(r.GetNamespace()); err != nil {
		return nil, GRPCError(err)
	}
	if _, err := a.b.getPolicies(ctx, r.GetNamespace()); err != nil {
		return nil, GRPCError(err)
	}
	topics, err := listTopicKeys(ctx, a.b.cfg.Regional, managedLedgerPrefix+r.GetNamespace()+"/")
	if err != nil {
		return nil, GRPCError(err)
	}
	if len(topics) > 0 {
		return nil, GRPCError(fmt.Errorf("%w: namespace %s has %d topics; delete them first", ErrNotAllowed, r.GetNamespace(), len(topics)))
	}
	if err := a.b.checkNoPartitioned(ctx, r.GetNamespace()); err != nil { // partitioned.go
		return nil, GRPCError(err)
	}
	if err := a.b.cfg.Global.Delete(ctx, namespacePrefix+r.GetNamespace(), metadata.AnyVersion); err != nil {
		return nil, GRPCError(fmt.Errorf("%w: %v", ErrUnavailable, err))
	}
	a.b.policies.forget(namespacePrefix + r.GetNamespace())
	a.b.deleteNamespaceOverlays(ctx, r.GetNamespace())
	return &clientv1.DeleteNamespaceResponse{}, nil
}

func (a *adminService) GetNamespacePolicies(ctx context.Context, r *clientv1.GetNamespacePoliciesRequest) (*clientv1.GetNamespacePoliciesResponse, error) {
	if _, _, err := ParseNamespace(r.GetNamespace()); err != nil {
		return nil, GRPCError(err)
	}
	p, err := a.b.getPolicies(ctx, r.GetNamespace())
	if err != nil {
		return nil, GRPCError(err)
	}
	return &clientv1.GetNamespacePoliciesResponse{Policies: p}, nil
}

func (a *adminService) SetNamespacePolicies(ctx context.Context, r *clientv1.SetNamespacePoliciesRequest) (*clientv1.SetNamespacePoliciesResponse, error) {
	if _, _, err := ParseNamespace(r.GetNamespace()); err != nil {
		return nil, GRPCError(err)
	}
	p := r.GetPolicies()
	if p == nil {
		p = &clientv1.NamespacePolicies{}
	}
	if err := a.b.validatePolicies(p); err != nil {
		return nil, GRPCError(err)
	}
	// Nor may it make a prefix policy or topic override invalid (policies.go).
	if err := a.b.checkOverlaysUnder(ctx, r.GetNamespace(), "", p, nil); err != nil {
		return nil, GRPCError(err)
	}
	kv, err := a.b.cfg.Global.Get(ctx, namespacePrefix+r.GetNamespace(), metadata.ReadOptions{})
	if err != nil {
		if errors.Is(err, metadata.ErrNotFound) {
			return nil, GRPCError(fmt.Errorf("%w: namespace %s does not exist", ErrNotFound, r.GetNamespace()))
		}
		return nil, GRPCError(fmt.Errorf("%w: %v", ErrUnavailable, err))
	}
	cur, perr := parsePolicies(r.GetNamespace(), kv.Value)
	if perr != nil || !slices.Equal(cur.GetReplicationRegions(), p.GetReplicationRegions()) {
		if err := a.b.checkRegionsAllowed(ctx, r.GetNamespace(), "replication_regions", p.GetReplicationRegions()); err != nil {
			return nil, GRPCError(err)
		}
	}
	if perr != nil || !slices.Equal(cur.GetMaxReplicationLagRegions(), p.GetMaxReplicationLagRegions()) {
		if err := a.b.checkRegionsAllowed(ctx, r.GetNamespace(), "max_replication_lag_regions", p.GetMaxReplicationLagRegions()); err != nil {
			return nil, GRPCError(err)
		}
	}
	// Grants change through GrantPermission / RevokePermission only.
	if perr == nil {
		if err := keepPermissions(cur, p); err != nil {
			return nil, GRPCError(err)
		}
	}
	val, _ := protojson.Marshal(p)
	nkv, err := a.b.cfg.Global.Put(ctx, namespacePrefix+r.GetNamespace(), val, kv.Version, 0)
	if err != nil {
		return nil, GRPCError(fmt.Errorf("%w: %v", ErrUnavailable, err))
	}
	a.b.policies.learn(nkv)
	// Loaded topics get their new effective policies (policies.go).
	a.b.policyChanged(namespacePrefix + r.GetNamespace())
	return &clientv1.SetNamespacePoliciesResponse{}, nil
}

func (a *adminService) ListTopics(ctx context.Context, r *clientv1.ListTopicsRequest) (*clientv1.ListTopicsResponse, error) {
	if _, _, err := ParseNamespace(r.GetNamespace()); err != nil {
		return nil, GRPCError(err)
	}
	if _, err := a.b.getPolicies(ctx, r.GetNamespace()); err != nil {
		return nil, GRPCError(err)
	}
	if p := r.GetPrefix(); len(p) > MaxTopicBytes {
		return nil, GRPCError(fmt.Errorf("%w: prefix is %d bytes, limit %d", ErrInvalidArgument, len(p), MaxTopicBytes))
	}
	// The store lists by key prefix: the prefix narrows the listing itself.
	ts, err := listTopicKeys(ctx, a.b.cfg.Regional, managedLedgerPrefix+r.GetNamespace()+"/"+r.GetPrefix())
	if err != nil {
		return nil, GRPCError(err)
	}
	for i := range ts {
		ts[i] = r.GetNamespace() + "/" + r.GetPrefix() + ts[i]
	}
	return &clientv1.ListTopicsResponse{Topics: ts}, nil
}

// owned resolves a topic for an admin call: the local topic, or the owner's
// admin client to forward to.
func (a *adminService) owned(ctx context.Context, topicName string, create bool) (*topic, clientv1.AdminClient, error) {
	name, err := ParseTopic(topicName)
	if err != nil {
		return nil, nil, err
	}
	if !create {
		if _, err := a.b.getPolicies(ctx, name.NamespaceName()); err != nil {
			return nil, nil, err
		}
	}
	t, err := a.b.getTopic(ctx, name, create)
	var no *notOwnedError
	if errors.As(err, &no) && no.owner != "" && no.owner != a.b.self.GRPC {
		c, perr := a.b.peer(no.owner)
		if perr != nil {
			return nil, nil, err
		}
		return nil, clientv1.NewAdminClient(c), nil
	}
	return t, nil, err
}

func (a *adminService) CreateTopic(ctx context.Context, r *clientv1.CreateTopicRequest) (*clientv1.CreateTopicResponse, error) {
	name, err := ParseTopic(r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	if _, err := a.b.getPolicies(ctx, name.NamespaceName()); err != nil {
		return nil, GRPCError(err)
	}
	if _, err := a.b.cfg.Regional.Get(ctx, managedLedgerPrefix+name.String(), metadata.ReadOptions{}); err == nil {
		return nil, GRPCError(fmt.Errorf("%w: topic %s", ErrAlreadyExists, name))
	}
	if err := a.b.refusePartitionedBase(ctx, name); err != nil { // partitioned.go
		return nil, GRPCError(err)
	}
	if err := a.b.checkTopicCreation(ctx, name, false); err != nil { // limits.go
		return nil, GRPCError(err)
	}
	if _, err := a.b.lookup(ctx, name, false); err != nil {
		return nil, GRPCError(err)
	}
	return &clientv1.CreateTopicResponse{}, nil
}

func (a *adminService) DeleteTopic(ctx context.Context, r *clientv1.DeleteTopicRequest) (*clientv1.DeleteTopicResponse, error) {
	t, fwd, err := a.owned(ctx, r.GetTopic(), false)
	if fwd != nil {
		return fwd.DeleteTopic(ctx, r)
	}
	if err != nil {
		return nil, GRPCError(err)
	}
	t.mu.Lock()
	np := len(t.producers)
	nc := 0
	for _, s := range t.subs {
		s.mu.Lock()
		nc += len(s.consumers)
		s.mu.Unlock()
	}
	t.mu.Unlock()
	if (np > 0 || nc > 0) && !r.GetForce() {
		return nil, GRPCError(fmt.Errorf("%w: topic %s has %d producers and %d consumers connected; use force", ErrNotAllowed, t.name, np, nc))
	}
	a.b.unloadTopicCtx(ctx, t, true, nil)
	if h := a.b.beforeTopicDelete.Load(); h != nil {
		(*h)()
	}
	t.ml.mu.Lock()
	ledgers := make(map[int64]bool, len(t.ml.rec.Ledgers))
	for _, li := range t.ml.rec.Ledgers {
		ledgers[li.ID] = true
	}
	t.ml.mu.Unlock()
	if err := a.b.deleteUnloadedTopic(ctx, t.name, ledgers); err != nil {
		return nil, GRPCError(err)
	}
	return &clientv1.DeleteTopicResponse{}, nil
}

// deleteUnloadedTopic deletes the metadata and the ledgers of a topic this
// broker has just unloaded, whose ledger list held the ledgers closed. Once
// unloaded, anyone may take the topic again (a producer reconnecting), so
// every metadata delete is guarded by the versions read after the unload,
// and the ledger list must still be the one closed here: a topic taken
// again has a new ledger (and a new version), and then nothing is deleted
// and the error says to retry. No acknowledged message is ever orphaned.
func (s *Server) deleteUnloadedTopic(ctx context.Context, name TopicName, closed map[int64]bool) error {
	mlKey := managedLedgerPrefix + name.String()
	deleted := 0 // cursors
	reclaimed := func() error {
		what := "nothing was deleted"
		if deleted > 0 {
			what = fmt.Sprintf("only %d of its cursors were deleted", deleted)
		}
		return fmt.Errorf("%w: topic %s was taken again (a producer or consumer reconnected) while it was being deleted; %s; retry the delete", ErrUnavailable, name, what)
	}
	kv, err := s.cfg.Regional.Get(ctx, mlKey, metadata.ReadOptions{})
	if errors.Is(err, metadata.ErrNotFound) {
		return fmt.Errorf("%w: topic %s", ErrNotFound, name)
	}
	if err != nil {
		return fmt.Errorf("%w: read ledger list of %s: %v", ErrUnavailable, name, err)
	}
	var rec mlRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		return fmt.Errorf("broker: ledger list of %s is corrupt: %v", name, err)
	}
	for _, li := range rec.Ledgers {
		if !closed[li.ID] {
			return reclaimed()
		}
	}
	var cursors []metadata.KV
	cprefix := cursorPrefix + name.String() + "/"
	if err := s.listAll(ctx, cprefix, func(c metadata.KV) {
		if !strings.Contains(c.Key[len(cprefix):], "/") { // not a deeper topic's cursor
			cursors = append(cursors, c)
		}
	}); err != nil {
		return err
	}
	// Cursors go first, in transactions that each check the ledger list's
	// version (a transaction holds at most 128 operations); the list goes
	// with the last one. A topic taken again in between fails the check.
	const perTxn = 100
	for {
		n := min(len(cursors), perTxn)
		ops := make([]metadata.Op, 0, n+1)
		for _, c := range cursors[:n] {
			ops = append(ops, metadata.Op{Type: metadata.OpDelete, Key: c.Key, ExpectedVersion: c.Version})
		}
		cursors = cursors[n:]
		last := len(cursors) == 0
		guard := metadata.Op{Type: metadata.OpCheck, Key: mlKey, ExpectedVersion: kv.Version}
		if last {
			guard.Type = metadata.OpDelete
		}
		ops = append(ops, guard)
		if _, err := s.cfg.Regional.Txn(ctx, ops); err != nil {
			if errors.Is(err, metadata.ErrVersionMismatch) || errors.Is(err, metadata.ErrNotFound) {
				return reclaimed()
			}
			return fmt.Errorf("%w: delete metadata of %s: %v", ErrUnavailable, name, err)
		}
		deleted += n
		if last {
			break
		}
	}
	for _, li := range rec.Ledgers {
		if err := s.cfg.Ledgers.Delete(ctx, li.ID); err != nil {
			s.log.Warn("delete ledger of deleted topic", "topic", name.String(), "ledger", li.ID, "err", err)
		}
	}
	s.log.Info("topic deleted", "topic", name.String(), "ledgers", len(rec.Ledgers))
	return nil
}

func (a *adminService) UnloadTopic(ctx context.Context, r *clientv1.UnloadTopicRequest) (*clientv1.UnloadTopicResponse, error) {
	t, fwd, err := a.owned(ctx, r.GetTopic(), false)
	if fwd != nil {
		return fwd.UnloadTopic(ctx, r)
	}
	if err != nil {
		return nil, GRPCError(err)
	}
	a.b.unloadTopicCtx(ctx, t, true, nil)
	return &clientv1.UnloadTopicResponse{}, nil
}

func (a *adminService) GetTopicStats(ctx context.Context, r *clientv1.GetTopicStatsRequest) (*clientv1.TopicStats, error) {
	if st, ok, err := a.partitionedStats(ctx, r); ok { // partitioned_stats.go
		return st, err
	}
	t, fwd, err := a.owned(ctx, r.GetTopic(), false)
	if fwd != nil {
		return fwd.GetTopicStats(ctx, r)
	}
	if err != nil {
		return nil, GRPCError(err)
	}
	entries, size := t.ml.totals()
	t.rateMu.Lock()
	rates := t.rates
	t.rateMu.Unlock()
	st := &clientv1.TopicStats{Topic: t.name.String(), OwnerBroker: a.b.cfg.BrokerID,
		MsgRateIn: rates[0], BytesRateIn: rates[1], MsgRateOut: rates[2], BytesRateOut: rates[3],
		MsgsInTotal: t.msgsIn.Load(), BytesInTotal: t.bytesIn.Load(), StorageSizeBytes: size, Entries: entries}
	t.mu.Lock()
	for _, p := range t.producers {
		st.Producers = append(st.Producers, &clientv1.ProducerStats{ProducerName: p.name, Address: p.addr, LastSequenceId: t.ml.lastSequence(p.dedupName())})
	}
	t.mu.Unlock()
	for _, s := range t.subList() {
		ss := &clientv1.SubscriptionStats{Name: s.name, BacklogEntries: s.backlog(), Durable: !s.nonDurable}
		var exact bool
		ss.MsgBacklog, exact, ss.UnackedMessages, ss.PartiallyAckedEntries, ss.DeadLetteredMessages = s.msgStats()
		ss.MsgBacklogEstimated = !exact
		ss.MsgRateRedeliver = s.redeliverRate()
		s.mu.Lock()
		ss.Type = s.typ
		ss.MarkDeletePosition = &clientv1.MessageId{LedgerId: s.markDelete.L, EntryId: s.markDelete.E}
		ss.Blocked = s.blockedStatsLocked()
		ss.PoisonEntries = s.poisonStatsLocked()
		ss.Replicated = s.cov.replicated
		for _, c := range s.consumers {
			ss.Consumers = append(ss.Consumers, &clientv1.ConsumerStats{ConsumerName: c.name, Address: c.addr,
				AvailablePermits: uint32(max(c.permits, 0)), UnackedEntries: c.pending, Active: c.active || s.sharedLikeLocked(), Priority: c.priority,
				UnackedMessages: s.consumerUnackedLocked(c)})
		}
		s.dispatchStatsLocked(ss) // keyshared.go
		s.mu.Unlock()
		ss.AckReplication = t.ackReplicationStats(s)
		st.BacklogEntries = max(st.BacklogEntries, ss.BacklogEntries)
		st.MsgBacklog = max(st.MsgBacklog, ss.MsgBacklog)
		st.Subscriptions = append(st.Subscriptions, ss)
	}
	sort.Slice(st.Subscriptions, func(i, j int) bool { return st.Subscriptions[i].Name < st.Subscriptions[j].Name })
	t.mu.Lock()
	st.RetainsNothing = len(st.Subscriptions) == 0 && retainsNothing(t.policies)
	t.mu.Unlock()
	st.Replicators = t.replicatorStats()
	t.fillBacklogStats(ctx, st) // ttl.go
	return st, nil
}

// retainsNothing reports a retention of 0 in time and size: with no
// subscription holding it back, retention deletes every closed ledger.
func retainsNothing(p *clientv1.NamespacePolicies) bool {
	return p.GetRetentionTimeSeconds() == 0 && p.GetRetentionSizeBytes() == 0
}

// maxShownAcks bounds the individually acknowledged entries internal
// stats lists (as ranges), so one answer stays small.
const maxShownAcks = 1000

func (a *adminService) GetTopicInternalStats(ctx context.Context, r *clientv1.GetTopicInternalStatsRequest) (*clientv1.TopicInternalStats, error) {
	t, fwd, err := a.owned(ctx, r.GetTopic(), false)
	if fwd != nil {
		return fwd.GetTopicInternalStats(ctx, r)
	}
	if err != nil {
		return nil, GRPCError(err)
	}
	entries, size := t.ml.totals()
	st := &clientv1.TopicInternalStats{Topic: t.name.String(), Entries: entries, StorageSizeBytes: size}
	t.ml.mu.Lock()
	for i, li := range t.ml.rec.Ledgers {
		info := &clientv1.LedgerInfo{LedgerId: li.ID, Entries: li.Entries, SizeBytes: li.Size, CreatedMs: li.CreatedMs, Closed: li.Entries >= 0}
		if t.ml.writer != nil && li.ID == t.ml.writer.ID() {
			info.Entries = t.ml.countLocked(i)
			info.SizeBytes = t.ml.curSize
			info.Closed = false
		}
		st.Ledgers = append(st.Ledgers, info)
	}
	last := t.ml.lastPosLocked()
	t.ml.mu.Unlock()
	st.LastConfirmedEntry = &clientv1.MessageId{LedgerId: last.L, EntryId: last.E}
	for _, s := range t.subList() {
		s.mu.Lock()
		ci := &clientv1.CursorInfo{Name: s.name, MarkDeletePosition: &clientv1.MessageId{LedgerId: s.markDelete.L, EntryId: s.markDelete.E},
			IndividuallyAcked: formatRanges(ackRanges(s.acked, maxShownAcks)), LastPersistMs: s.lastPersist.UnixMilli(),
			IndividuallyAckedCount: int64(len(s.acked)), IndividuallyAckedTruncated: len(s.acked) > maxShownAcks,
			PartiallyAcked: formatBatchAcks(batchAcksToRecord(s.batchAcked, maxShownAcks)), PartiallyAckedCount: int64(len(s.batchAcked))}
		if s.cov.v != nil {
			ci.AckVectorRanges, _ = s.cov.v.rangeCount()
			ci.AckVectorBytes = int64(s.cov.v.approxBytes())
		}
		s.mu.Unlock()
		st.Cursors = append(st.Cursors, ci)
	}
	sort.Slice(st.Cursors, func(i, j int) bool { return st.Cursors[i].Name < st.Cursors[j].Name })
	return st, nil
}

func (a *adminService) ListSubscriptions(ctx context.Context, r *clientv1.ListSubscriptionsRequest) (*clientv1.ListSubscriptionsResponse, error) {
	t, fwd, err := a.owned(ctx, r.GetTopic(), false)
	if fwd != nil {
		return fwd.ListSubscriptions(ctx, r)
	}
	if err != nil {
		return nil, GRPCError(err)
	}
	var out []string
	for _, s := range t.subList() {
		out = append(out, s.name)
	}
	sort.Strings(out)
	return &clientv1.ListSubscriptionsResponse{Subscriptions: out}, nil
}

func (a *adminService) CreateSubscription(ctx context.Context, r *clientv1.CreateSubscriptionRequest) (*clientv1.CreateSubscriptionResponse, error) {
	if err := ValidateName("subscription", r.GetSubscription()); err != nil {
		return nil, GRPCError(err)
	}
	if _, ok := clientv1.InitialPosition_name[int32(r.GetInitialPosition())]; !ok {
		return nil, GRPCError(fmt.Errorf("%w: initial_position %d is not LATEST or EARLIEST", ErrInvalidArgument, r.GetInitialPosition()))
	}
	t, fwd, err := a.owned(ctx, r.GetTopic(), false)
	if fwd != nil {
		return fwd.CreateSubscription(ctx, r)
	}
	if err != nil {
		return nil, GRPCError(err)
	}
	if isReplName(r.GetSubscription()) {
		return nil, GRPCError(fmt.Errorf("%w: subscription %q: names starting with %q are the replicators' cursors", ErrInvalidArgument, r.GetSubscription(), ReplicatorCursorPrefix))
	}
	if _, _, err := t.getOrCreateSubOpts(ctx, r.GetSubscription(), subCreate{initial: r.GetInitialPosition(), mustCreate: true, replicated: r.GetReplicated()}); err != nil {
		return nil, GRPCError(err)
	}
	return &clientv1.CreateSubscriptionResponse{}, nil
}

func (a *adminService) DeleteSubscription(ctx context.Context, r *clientv1.DeleteSubscriptionRequest) (*clientv1.DeleteSubscriptionResponse, error) {
	if err := ValidateName("subscription", r.GetSubscription()); err != nil {
		return nil, GRPCError(err)
	}
	t, fwd, err := a.owned(ctx, r.GetTopic(), false)
	if fwd != nil {
		return fwd.DeleteSubscription(ctx, r)
	}
	if err != nil {
		return nil, GRPCError(err)
	}
	if isReplName(r.GetSubscription()) {
		if err := a.b.checkReplicatorCursorDelete(ctx, t, r.GetSubscription()); err != nil {
			return nil, GRPCError(err)
		}
		t.replicators.stopOne(strings.TrimPrefix(r.GetSubscription(), ReplicatorCursorPrefix))
	}
	return &clientv1.DeleteSubscriptionResponse{}, GRPCError(t.deleteSub(ctx, r.GetSubscription(), r.GetForce()))
}

func (a *adminService) ResetSubscription(ctx context.Context, r *clientv1.ResetSubscriptionRequest) (*clientv1.ResetSubscriptionResponse, error) {
	if err := ValidateName("subscription", r.GetSubscription()); err != nil {
		return nil, GRPCError(err)
	}
	sp, err := resetStart(r)
	if err != nil {
		return nil, GRPCError(err)
	}
	t, fwd, err := a.owned(ctx, r.GetTopic(), false)
	if fwd != nil {
		return fwd.ResetSubscription(ctx, r)
	}
	if err != nil {
		return nil, GRPCError(err)
	}
	if isReplName(r.GetSubscription()) {
		return nil, GRPCError(replicatorCursorResetError(r.GetSubscription()))
	}
	s, err := t.subscription(r.GetSubscription())
	if err != nil {
		return nil, GRPCError(err)
	}
	// seek.go: resolved per origin, like a consumer's seek; consumers stay
	// connected and receive from the new position.
	res, err := t.resolve(ctx, "position", sp)
	if err != nil {
		return nil, GRPCError(err)
	}
	t.applyResolution(s, res)
	if err := s.persist(ctx, true); err != nil {
		return nil, GRPCError(fmt.Errorf("%w: %v", ErrUnavailable, err))
	}
	return &clientv1.ResetSubscriptionResponse{}, nil
}

// resetStart is a reset request's position as a StartPosition.
func resetStart(r *clientv1.ResetSubscriptionRequest) (*clientv1.StartPosition, error) {
	switch p := r.GetPosition().(type) {
	case *clientv1.ResetSubscriptionRequest_InitialPosition:
		return &clientv1.StartPosition{Kind: &clientv1.StartPosition_Initial{Initial: p.InitialPosition}}, nil
	case *clientv1.ResetSubscriptionRequest_MessageId:
		return &clientv1.StartPosition{Kind: &clientv1.StartPosition_MessageId{MessageId: p.MessageId}}, nil
	case *clientv1.ResetSubscriptionRequest_PublishTimeMs:
		return &clientv1.StartPosition{Kind: &clientv1.StartPosition_PublishTimeMs{PublishTimeMs: p.PublishTimeMs}}, nil
	case *clientv1.ResetSubscriptionRequest_OriginPosition:
		if p.OriginPosition == nil {
			return nil, fmt.Errorf("%w: origin_position is empty: give region, ledger_id and entry_id", ErrInvalidArgument)
		}
		return &clientv1.StartPosition{Kind: &clientv1.StartPosition_Origin{Origin: p.OriginPosition}}, nil
	}
	return nil, fmt.Errorf("%w: position is unset: give message_id, publish_time_ms, origin_position or initial_position", ErrInvalidArgument)
}

func (a *adminService) ListBrokers(ctx context.Context, _ *clientv1.ListBrokersRequest) (*clientv1.ListBrokersResponse, error) {
	resp := &clientv1.ListBrokersResponse{}
	load := map[string]int32{}
	_ = a.b.listAll(ctx, ownerPrefix, func(kv metadata.KV) {
		var o ownerRecord
		if jsonUnmarshal(kv.Value, &o) == nil {
			load[o.BrokerID]++
		}
	})
	err := a.b.listAll(ctx, brokerPrefix, func(kv metadata.KV) {
		var o ownerRecord
		if jsonUnmarshal(kv.Value, &o) == nil {
			resp.Brokers = append(resp.Brokers, &clientv1.BrokerInfo{BrokerId: o.BrokerID, GrpcAddress: o.GRPC, HttpAddress: o.HTTP, OwnedTopics: load[o.BrokerID]})
		}
	})
	return resp, GRPCError(err)
}

// ---- bookies and autorecovery (package autorecovery, on the regional shard) ----

// autorecoveryError maps an autorecovery error to a broker sentinel.
func autorecoveryError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, autorecovery.ErrInvalidArgument):
		return GRPCError(fmt.Errorf("%w: %v", ErrInvalidArgument, err))
	}
	return GRPCError(fmt.Errorf("%w: %v", ErrUnavailable, err))
}

func bookieStatusProto(b autorecovery.BookieStatus) *clientv1.BookieStatus {
	return &clientv1.BookieStatus{
		BookieId: b.ID, Address: b.Address, Region: b.Region, Rack: b.Rack,
		Live: b.Live, ReadOnly: b.ReadOnly, Decommissioned: b.Decommissioned,
		UnderReplicatedLedgers: int32(b.UnderReplicatedLedgers), ReadOnlyReason: b.ReadOnlyReason,
		InstanceId: b.InstanceID, LimboBelowLedger: b.LimboBelowLedger, LimboReason: b.LimboReason,
	}
}

func (a *adminService) ListBookies(ctx context.Context, _ *clientv1.ListBookiesRequest) (*clientv1.ListBookiesResponse, error) {
	r, err := autorecovery.Status(ctx, a.b.cfg.Regional)
	if err != nil {
		return nil, autorecoveryError(err)
	}
	resp := &clientv1.ListBookiesResponse{UnderReplicatedCount: int64(r.UnderReplicatedCount)}
	for _, b := range r.Bookies {
		resp.Bookies = append(resp.Bookies, bookieStatusProto(b))
	}
	return resp, nil
}

func (a *adminService) GetAutorecoveryStatus(ctx context.Context, _ *clientv1.GetAutorecoveryStatusRequest) (*clientv1.AutorecoveryStatus, error) {
	r, err := autorecovery.Status(ctx, a.b.cfg.Regional)
	if err != nil {
		return nil, autorecoveryError(err)
	}
	resp := &clientv1.AutorecoveryStatus{
		Paused: r.Paused, PausedReason: r.PausedReason, Auditor: r.Auditor,
		UnderReplicatedCount: int64(r.UnderReplicatedCount),
	}
	for _, u := range r.UnderReplicated {
		resp.UnderReplicated = append(resp.UnderReplicated, &clientv1.UnderReplicatedLedger{
			LedgerId: u.LedgerID, Missing: u.Missing, MarkedUnixMs: u.MarkedAt.UnixMilli(), Worker: u.Worker,
			Corrupt: u.Corrupt, Incomplete: u.Incomplete,
		})
	}
	for _, b := range r.Bookies {
		resp.Bookies = append(resp.Bookies, bookieStatusProto(b))
	}
	return resp, nil
}

func (a *adminService) PauseAutorecovery(ctx context.Context, r *clientv1.PauseAutorecoveryRequest) (*clientv1.PauseAutorecoveryResponse, error) {
	if err := autorecovery.Pause(ctx, a.b.cfg.Regional, r.GetReason()); err != nil {
		return nil, autorecoveryError(err)
	}
	a.b.log.Info("autorecovery paused", "reason", r.GetReason())
	return &clientv1.PauseAutorecoveryResponse{}, nil
}

func (a *adminService) ResumeAutorecovery(ctx context.Context, _ *clientv1.ResumeAutorecoveryRequest) (*clientv1.ResumeAutorecoveryResponse, error) {
	if err := autorecovery.Resume(ctx, a.b.cfg.Regional); err != nil {
		return nil, autorecoveryError(err)
	}
	a.b.log.Info("autorecovery resumed")
	return &clientv1.ResumeAutorecoveryResponse{}, nil
}

func (a *adminService) DecommissionBookie(ctx context.Context, r *clientv1.DecommissionBookieRequest) (*clientv1.DecommissionBookieResponse, error) {
	if err := autorecovery.Decommission(ctx, a.b.cfg.Regional, r.GetBookieId()); err != nil {
		return nil, autorecoveryError(err)
	}
	a.b.log.Info("bookie decommissioned", "bookie", r.GetBookieId())
	return &clientv1.DecommissionBookieResponse{}, nil
}

func (a *adminService) RecommissionBookie(ctx context.Context, r *clientv1.RecommissionBookieRequest) (*clientv1.RecommissionBookieResponse, error) {
	if err := autorecovery.Recommission(ctx, a.b.cfg.Regional, r.GetBookieId()); err != nil {
		return nil, autorecoveryError(err)
	}
	a.b.log.Info("bookie recommissioned", "bookie", r.GetBookieId())
	return &clientv1.RecommissionBookieResponse{}, nil
}
