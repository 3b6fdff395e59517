package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/meridianmq/meridian/metadata"
)

// regionPrefix + region name holds a regionRecord in the global shard.
const regionPrefix = "regions/"

// regionBrokerTTL is how long a broker entry of a region record counts as
// current without being re-registered; older entries are pruned by the
// next registration in that region.
const regionBrokerTTL = 24 * time.Hour

// RegionRecord is a region's entry in the global shard (`regions/<name>`):
// the brokers other regions may dial to reach it. Every broker adds itself
// when it starts (compare-and-set), so the record names live and recently
// live brokers; a dialer tries them in turn, and any broker of the region
// forwards a lookup to the topic's owner.
type RegionRecord struct {
	Name    string                  `json:"name"`
	Brokers map[string]RegionBroker `json:"brokers"`
}

// RegionBroker is one broker in a RegionRecord.
type RegionBroker struct {
	GRPC      string `json:"grpc"`
	HTTP      string `json:"http,omitempty"`
	UpdatedMs int64  `json:"updated_ms"`
	// WAN is the broker's WAN gossip address ("" without a WAN pool);
	// brokers of other regions join it (broker/wan.go).
	WAN string `json:"wan,omitempty"`
}

// Endpoints returns the record's gRPC addresses, most recently registered
// first.
func (r RegionRecord) Endpoints() []string {
	type e struct {
		addr string
		at   int64
	}
	var es []e
	for _, b := range r.Brokers {
		es = append(es, e{b.GRPC, b.UpdatedMs})
	}
	sort.Slice(es, func(i, j int) bool {
		if es[i].at != es[j].at {
			return es[i].at > es[j].at
		}
		return es[i].addr < es[j].addr
	})
	out := make([]string, len(es))
	for i, x := range es {
		out[i] = x.addr
	}
	return out
}

// registerRegion adds this broker to its region's record in the global
// shard. It is best effort: a region cut off from the global quorum keeps
// serving, and the next start registers again.
func (s *Server) registerRegion(ctx context.Context) error {
	key := regionPrefix + s.cfg.Region
	for attempt := 0; attempt < 5; attempt++ {
		rec := RegionRecord{Name: s.cfg.Region, Brokers: map[string]RegionBroker{}}
		version := metadata.MustNotExist
		kv, err := s.cfg.Global.Get(ctx, key, metadata.ReadOptions{})
		switch {
		case errors.Is(err, metadata.ErrNotFound):
		case err != nil:
			return err
		default:
			if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.Brokers == nil {
				rec = RegionRecord{Name: s.cfg.Region, Brokers: map[string]RegionBroker{}}
			}
			version = kv.Version
		}
		now := time.Now().UnixMilli()
		for id, b := range rec.Brokers {
			if now-b.UpdatedMs > regionBrokerTTL.Milliseconds() {
				delete(rec.Brokers, id)
			}
		}
		rec.Brokers[s.cfg.BrokerID] = RegionBroker{GRPC: s.self.GRPC, HTTP: s.self.HTTP, UpdatedMs: now, WAN: s.wanAddr()}
		val, _ := json.Marshal(&rec)
		nkv, err := s.cfg.Global.Put(ctx, key, val, version, 0)
		if errors.Is(err, metadata.ErrVersionMismatch) {
			continue
		}
		if err == nil {
			s.policies.learn(nkv)
		}
		return err
	}
	return fmt.Errorf("register region %s: too many concurrent updates", s.cfg.Region)
}

// RegionInfo reads a region's record through the policy cache (which
// follows regions/ in the global shard): with the global quorum
// unreachable it answers with the last record seen, else this node's
// stale copy.
func (s *Server) RegionInfo(ctx context.Context, region string) (RegionRecord, error) {
	kv, err := s.policies.get(ctx, regionPrefix+region, false)
	if errors.Is(err, metadata.ErrNotFound) {
		return RegionRecord{}, fmt.Errorf("%w: region %q is not registered", ErrNotFound, region)
	}
	if err != nil {
		return RegionRecord{}, fmt.Errorf("%w: read region %q: %v", ErrUnavailable, region, err)
	}
	return parseRegionRecord(region, kv.Value)
}

// parseRegionRecord decodes a region's record (regions/<name>).
func parseRegionRecord(region string, val []byte) (RegionRecord, error) {
	var rec RegionRecord
	if err := json.Unmarshal(val, &rec); err != nil {
		return RegionRecord{}, fmt.Errorf("region record %q is corrupt: %v", region, err)
	}
	return rec, nil
}

// dialAddr is the address to dial for addr: the broker's dial_rewrite
// entry for it (a link proxy in `meridian dev`), or addr itself.
func (s *Server) dialAddr(addr string) string {
	if to, ok := s.cfg.DialRewrite[addr]; ok {
		return to
	}
	return addr
}
