package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/metadata"
	"google.golang.org/protobuf/encoding/protojson"
)

// keep makes sure that every topic of a namespace replicated from this
// region that has replicator backlog (or no replicator cursor yet) is
// loaded by some broker of the region: replication then goes on after
// restarts without any client touching the topic. Topics are assigned
// through the normal lookup path (least loaded broker). Every broker runs
// it; concurrent claims are settled by the ownership compare-and-set.
//
// Cost: one list of the namespaces (global shard) and, per replicated
// namespace, one list of its topics and a few reads per topic not loaded.
func (m *replManager) keep() error {
	ctx, cancel := m.ctx()
	defer cancel()
	s := m.s
	self := s.cfg.Region
	loaded := map[string]bool{}
	for _, t := range s.loadedTopics() {
		loaded[t.name.String()] = true
	}
	var errs []error
	page := metadata.Page{}
	for range 1000 {
		res, err := s.cfg.Global.List(ctx, namespacePrefix, page, metadata.ReadOptions{Stale: true})
		if err != nil {
			return fmt.Errorf("list namespaces: %w", err)
		}
		for _, kv := range res.KVs {
			ns := kv.Key[len(namespacePrefix):]
			if strings.Count(ns, "/") != 1 {
				continue
			}
			pol := &clientv1.NamespacePolicies{}
			if protojson.Unmarshal(kv.Value, pol) != nil {
				continue
			}
			regions := pol.GetReplicationRegions()
			if len(regions) < 2 || !slices.Contains(regions, self) {
				continue
			}
			if err := m.keepNamespace(ctx, ns, regions, loaded); err != nil {
				errs = append(errs, err)
			}
		}
		if !res.More || len(res.KVs) == 0 {
			break
		}
		page.After = res.KVs[len(res.KVs)-1].Key
	}
	return errors.Join(errs...)
}

func (m *replManager) keepNamespace(ctx context.Context, ns string, regions []string, loaded map[string]bool) error {
	s := m.s
	topics, err := listTopicKeys(ctx, s.cfg.Regional, managedLedgerPrefix+ns+"/")
	if err != nil {
		return err
	}
	for _, tp := range topics {
		full := ns + "/" + tp
		if loaded[full] {
			continue
		}
		if _, err := s.cfg.Regional.Get(ctx, ownerPrefix+full, metadata.ReadOptions{}); err == nil {
			continue // owned: its owner runs the replicators
		}
		need, err := m.hasReplBacklog(ctx, full, regions)
		if err != nil || !need {
			continue
		}
		name, err := ParseTopic(full)
		if err != nil {
			continue
		}
		if _, err := s.lookup(ctx, name, false); err != nil {
			s.log.Debug("replication keeper: load topic", "topic", full, "err", err)
			continue
		}
		s.log.Info("replication keeper: loaded topic with replicator backlog", "topic", full)
	}
	return nil
}

// hasReplBacklog tells from metadata alone whether a topic not loaded has
// entries some replicator cursor has not passed (or a missing cursor).
func (m *replManager) hasReplBacklog(ctx context.Context, topic string, regions []string) (bool, error) {
	s := m.s
	kv, err := s.cfg.Regional.Get(ctx, managedLedgerPrefix+topic, metadata.ReadOptions{})
	if err != nil {
		return false, err
	}
	var rec mlRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		return false, err
	}
	seq := map[int64]int64{}
	var last *ledgerInfo
	for i := range rec.Ledgers {
		li := &rec.Ledgers[i]
		seq[li.ID] = li.Seq
		if li.Entries < 0 {
			return true, nil // left open by a crashed owner: recover it
		}
		if li.Entries > 0 {
			last = li
		}
	}
	if last == nil {
		return false, nil
	}
	for _, r := range regions {
		if r == s.cfg.Region {
			continue
		}
		ckv, err := s.cfg.Regional.Get(ctx, cursorPrefix+topic+"/"+ReplicatorCursorPrefix+r, metadata.ReadOptions{})
		if errors.Is(err, metadata.ErrNotFound) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		md, _, _, err := decodeCursor(ckv.Value, 0) // the mark-delete only
		if err != nil {
			return true, nil
		}
		ms, ok := seq[md.L]
		if !ok {
			return true, nil // before every retained entry
		}
		if ms < last.Seq || ms == last.Seq && md.E < last.Entries-1 {
			return true, nil
		}
	}
	return false, nil
}
