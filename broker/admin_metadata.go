package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/metadata"
)

// Read-only operator views of the metadata store and of ledgers. They read
// the metadata directly (linearizable reads), so any broker answers them,
// whoever owns the topic.

const (
	// defaultMetadataPage is the ListMetadataKeys page when none is asked.
	defaultMetadataPage = 100
)

// addMetadataAdminRoutes adds this file's methods to the HTTP admin routes.
func addMetadataAdminRoutes(routes map[string]adminRoute, a *adminService) {
	routes["GetMetadataStatus"] = route(func() *clientv1.GetMetadataStatusRequest { return &clientv1.GetMetadataStatusRequest{} }, a.GetMetadataStatus)
	routes["GetMetadataKey"] = route(func() *clientv1.GetMetadataKeyRequest { return &clientv1.GetMetadataKeyRequest{} }, a.GetMetadataKey)
	routes["ListMetadataKeys"] = route(func() *clientv1.ListMetadataKeysRequest { return &clientv1.ListMetadataKeysRequest{} }, a.ListMetadataKeys)
	routes["GetLedger"] = route(func() *clientv1.GetLedgerRequest { return &clientv1.GetLedgerRequest{} }, a.GetLedger)
	routes["ListTopicLedgers"] = route(func() *clientv1.ListTopicLedgersRequest { return &clientv1.ListTopicLedgersRequest{} }, a.ListTopicLedgers)
}

// metadataShard picks the store a request names.
func (a *adminService) metadataShard(s clientv1.MetadataShard) (metadata.Store, string, error) {
	switch s {
	case clientv1.MetadataShard_METADATA_SHARD_REGIONAL:
		return a.b.cfg.Regional, "regional", nil
	case clientv1.MetadataShard_METADATA_SHARD_GLOBAL:
		return a.b.cfg.Global, "global", nil
	}
	return nil, "", fmt.Errorf("%w: shard %d must be regional (0) or global (1)", ErrInvalidArgument, s)
}

// metadataError maps a metadata store error to the broker's sentinels.
func metadataError(err error, what string) error {
	switch {
	case errors.Is(err, metadata.ErrNotFound):
		return fmt.Errorf("%w: %s", ErrNotFound, what)
	case errors.Is(err, metadata.ErrInvalidArgument):
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	return fmt.Errorf("%w: %s: %v", ErrUnavailable, what, err)
}

// GetMetadataStatus implements clientv1.AdminServer.
func (a *adminService) GetMetadataStatus(ctx context.Context, _ *clientv1.GetMetadataStatusRequest) (*clientv1.MetadataStatus, error) {
	sr, ok := a.b.cfg.Regional.(metadata.StatusReporter)
	if !ok {
		return nil, GRPCError(fmt.Errorf("%w: this broker's metadata store (%T) does not report leadership; ask the metadata nodes directly (--metadata)", ErrUnavailable, a.b.cfg.Regional))
	}
	return metadataStatusProto(sr.NodeStatuses(ctx)), nil
}

// metadataStatusProto converts node statuses for the admin API.
func metadataStatusProto(nodes []metadata.NodeStatus) *clientv1.MetadataStatus {
	out := &clientv1.MetadataStatus{}
	for _, n := range nodes {
		pn := &clientv1.MetadataNodeStatus{Endpoint: n.Endpoint, Error: n.Error, NodeId: n.NodeID, RaftAddress: n.RaftAddress}
		for _, s := range n.Shards {
			pn.Shards = append(pn.Shards, &clientv1.MetadataShardStatus{Name: s.Name, ShardId: s.ShardID, LeaderId: s.LeaderID,
				LeaderAddress: s.LeaderAddress, Term: s.Term, IsLeader: s.IsLeader})
		}
		out.Nodes = append(out.Nodes, pn)
	}
	return out
}

// GetMetadataKey implements clientv1.AdminServer.
func (a *adminService) GetMetadataKey(ctx context.Context, r *clientv1.GetMetadataKeyRequest) (*clientv1.MetadataKeyValue, error) {
	store, name, err := a.metadataShard(r.GetShard())
	if err != nil {
		return nil, GRPCError(err)
	}
	if r.GetKey() == "" || len(r.GetKey()) > metadata.MaxKeyBytes {
		return nil, GRPCError(fmt.Errorf("%w: key must be 1..%d bytes, got %d", ErrInvalidArgument, metadata.MaxKeyBytes, len(r.GetKey())))
	}
	kv, err := store.Get(ctx, r.GetKey(), metadata.ReadOptions{})
	if err != nil {
		return nil, GRPCError(metadataError(err, fmt.Sprintf("key %q in the %s shard", r.GetKey(), name)))
	}
	return kvProto(kv), nil
}

func kvProto(kv metadata.KV) *clientv1.MetadataKeyValue {
	return &clientv1.MetadataKeyValue{Key: kv.Key, Value: kv.Value, Version: kv.Version, CreateRevision: kv.CreateRevision,
		ModRevision: kv.ModRevision, Session: uint64(kv.Session)}
}

// ListMetadataKeys implements clientv1.AdminServer.
func (a *adminService) ListMetadataKeys(ctx context.Context, r *clientv1.ListMetadataKeysRequest) (*clientv1.ListMetadataKeysResponse, error) {
	store, name, err := a.metadataShard(r.GetShard())
	if err != nil {
		return nil, GRPCError(err)
	}
	switch {
	case len(r.GetPrefix()) > metadata.MaxKeyBytes:
		return nil, GRPCError(fmt.Errorf("%w: prefix is %d bytes, limit %d", ErrInvalidArgument, len(r.GetPrefix()), metadata.MaxKeyBytes))
	case len(r.GetAfter()) > metadata.MaxKeyBytes:
		return nil, GRPCError(fmt.Errorf("%w: after is %d bytes, limit %d", ErrInvalidArgument, len(r.GetAfter()), metadata.MaxKeyBytes))
	case r.GetLimit() < 0 || r.GetLimit() > metadata.MaxPageLimit:
		return nil, GRPCError(fmt.Errorf("%w: limit %d must be in [0, %d]", ErrInvalidArgument, r.GetLimit(), metadata.MaxPageLimit))
	}
	limit := int(r.GetLimit())
	if limit == 0 {
		limit = defaultMetadataPage
	}
	res, err := store.List(ctx, r.GetPrefix(), metadata.Page{After: r.GetAfter(), Limit: limit}, metadata.ReadOptions{})
	if err != nil {
		return nil, GRPCError(metadataError(err, fmt.Sprintf("prefix %q in the %s shard", r.GetPrefix(), name)))
	}
	out := &clientv1.ListMetadataKeysResponse{More: res.More, Revision: res.Revision}
	for _, kv := range res.KVs {
		out.Kvs = append(out.Kvs, kvProto(kv))
	}
	return out, nil
}

// readLedger reads and decodes a ledger's metadata from the region's shard.
func (a *adminService) readLedger(ctx context.Context, id int64) (*clientv1.LedgerDetails, error) {
	kv, err := a.b.cfg.Regional.Get(ctx, ledger.LedgerKey(id), metadata.ReadOptions{})
	if err != nil {
		return nil, metadataError(err, fmt.Sprintf("ledger %d", id))
	}
	var md ledger.Metadata
	if err := json.Unmarshal(kv.Value, &md); err != nil {
		return nil, fmt.Errorf("%w: ledger %d metadata is not valid JSON: %v", ErrStorage, id, err)
	}
	d := &clientv1.LedgerDetails{LedgerId: id, State: string(md.State), EnsembleSize: int32(md.Ensemble), WriteQuorum: int32(md.WriteQuorum),
		AckQuorum: int32(md.AckQuorum), LastEntry: md.LastEntry, Length: md.Length, CreatedUnixMs: md.CreatedUnixMs,
		Properties: md.Properties, Version: kv.Version}
	if md.State != ledger.StateClosed {
		// Length is only recorded when the writer closes the ledger.
		d.Length = -1
	}
	for i, s := range md.Segments {
		last := md.LastEntry
		if i+1 < len(md.Segments) {
			last = md.Segments[i+1].FirstEntry - 1
		} else if md.State != ledger.StateClosed {
			last = -1
		}
		seg := &clientv1.LedgerSegment{FirstEntry: s.FirstEntry, LastEntry: last}
		for _, b := range s.Ensemble {
			seg.Ensemble = append(seg.Ensemble, &clientv1.LedgerBookie{BookieId: b.ID, Address: b.Address, Rack: b.Rack})
		}
		d.Segments = append(d.Segments, seg)
	}
	return d, nil
}

// GetLedger implements clientv1.AdminServer.
func (a *adminService) GetLedger(ctx context.Context, r *clientv1.GetLedgerRequest) (*clientv1.LedgerDetails, error) {
	if r.GetLedgerId() < 0 {
		return nil, GRPCError(fmt.Errorf("%w: ledger_id %d must not be negative", ErrInvalidArgument, r.GetLedgerId()))
	}
	d, err := a.readLedger(ctx, r.GetLedgerId())
	if err != nil {
		return nil, GRPCError(err)
	}
	return d, nil
}

// ListTopicLedgers implements clientv1.AdminServer. It reads the topic's
// managed-ledger key (not the owner's memory), so the open ledger shows
// topic_entries -1.
func (a *adminService) ListTopicLedgers(ctx context.Context, r *clientv1.ListTopicLedgersRequest) (*clientv1.ListTopicLedgersResponse, error) {
	name, err := ParseTopic(r.GetTopic())
	if err != nil {
		return nil, GRPCError(err)
	}
	kv, err := a.b.cfg.Regional.Get(ctx, managedLedgerPrefix+name.String(), metadata.ReadOptions{})
	if err != nil {
		return nil, GRPCError(metadataError(err, "topic "+name.String()))
	}
	var rec mlRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		return nil, GRPCError(fmt.Errorf("%w: topic %s ledger list is not valid JSON: %v", ErrStorage, name, err))
	}
	sort.SliceStable(rec.Ledgers, func(i, j int) bool { return rec.Ledgers[i].Seq < rec.Ledgers[j].Seq })
	out := &clientv1.ListTopicLedgersResponse{Topic: name.String()}
	for _, li := range rec.Ledgers {
		d, err := a.readLedger(ctx, li.ID)
		switch {
		case errors.Is(err, ErrNotFound):
			d = &clientv1.LedgerDetails{LedgerId: li.ID, State: "missing", LastEntry: -1, Length: -1}
		case err != nil:
			return nil, GRPCError(err)
		}
		d.TopicSeq, d.TopicEntries, d.TopicSizeBytes = li.Seq, li.Entries, li.Size
		out.Ledgers = append(out.Ledgers, d)
	}
	return out, nil
}
