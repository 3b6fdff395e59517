package broker

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RegionHealth reports the health of remote regions as the broker's WAN
// membership pool sees them. Region returns ok = false for a region the
// pool does not know (then the broker probes the region itself).
// Implementations must be safe for concurrent use and must not block.
type RegionHealth interface {
	Region(name string) (reachable bool, lastSeen time.Time, ok bool)
}

// ReplicationLag sums the replication of the topics a broker owns towards
// one remote region.
type ReplicationLag struct {
	// Topics counts the replicators towards the region.
	Topics int
	// BacklogMessages / BacklogBytes are not yet persisted by the region.
	BacklogMessages, BacklogBytes int64
	// MaxLag is the largest replication lag over those topics.
	MaxLag time.Duration
	// Stalled counts the replicators reported stalled.
	Stalled int
}

// ReplicationLagFunc returns the replication lag towards a region, ok =
// false when the broker runs no replicator towards it. It must be safe for
// concurrent use and must not block.
type ReplicationLagFunc func(region string) (lag ReplicationLag, ok bool)

// SetReplicationLagSource installs the function ListRegions asks for the
// replication lag summary (the replicators' owner calls it once).
func (s *Server) SetReplicationLagSource(f ReplicationLagFunc) { s.replLag.Store(&f) }

// regionProbeTimeout bounds the reachability probe of one region.
const regionProbeTimeout = 2 * time.Second

// regionProbeEndpoints caps the endpoints probed per region.
const regionProbeEndpoints = 3

// probeTopic is the topic name a reachability probe looks up: invalid on
// purpose, so the remote answers at once (INVALID_ARGUMENT) without
// reading metadata or assigning anything.
const probeTopic = "meridian.health-probe"

// regionProbes remembers when each region last answered a probe of this
// broker. The zero value is ready.
type regionProbes struct {
	mu sync.Mutex
	at map[string]time.Time // region -> last answer
}

func (p *regionProbes) seen(region string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at == nil {
		p.at = map[string]time.Time{}
	}
	p.at[region] = now
}

func (p *regionProbes) last(region string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.at[region]
	return at, ok
}

func (a *adminService) ListRegions(ctx context.Context, _ *clientv1.ListRegionsRequest) (*clientv1.ListRegionsResponse, error) {
	s := a.b
	kvs, stale, err := s.policies.listFresh(ctx, regionPrefix)
	if err != nil {
		return nil, GRPCError(err)
	}
	resp := &clientv1.ListRegionsResponse{Stale: stale}
	for _, kv := range kvs {
		name := strings.TrimPrefix(kv.Key, regionPrefix)
		if strings.Contains(name, "/") {
			continue
		}
		var rec RegionRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			resp.Regions = append(resp.Regions, &clientv1.RegionStatus{Name: name, HealthError: "region record corrupt: " + err.Error()})
			continue
		}
		resp.Regions = append(resp.Regions, &clientv1.RegionStatus{Name: name, Endpoints: rec.Endpoints(), Local: name == s.cfg.Region})
	}
	sort.Slice(resp.Regions, func(i, j int) bool { return resp.Regions[i].Name < resp.Regions[j].Name })
	var wg sync.WaitGroup
	for _, rs := range resp.Regions {
		rs.Replication = s.regionLag(rs.Name)
		switch {
		case rs.Local:
			rs.Reachable, rs.LastSeenMs, rs.HealthSource = true, time.Now().UnixMilli(), "local"
			continue
		case s.cfg.RegionHealth != nil || s.wan != nil:
			health := s.cfg.RegionHealth
			if health == nil {
				health = s.wan
			}
			if ok, seen, known := health.Region(rs.Name); known {
				rs.Reachable, rs.HealthSource = ok, "wan"
				if !seen.IsZero() {
					rs.LastSeenMs = seen.UnixMilli()
				}
				continue
			}
		}
		if rs.HealthError != "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.probeRegion(ctx, rs)
		}()
	}
	wg.Wait()
	return resp, nil
}

// regionLag asks the replication lag source about a region.
func (s *Server) regionLag(region string) *clientv1.RegionReplicationLag {
	if region == s.cfg.Region {
		return &clientv1.RegionReplicationLag{}
	}
	lag := s.replicationLagTo
	if f := s.replLag.Load(); f != nil && *f != nil {
		lag = *f
	}
	l, ok := lag(region)
	if !ok {
		return &clientv1.RegionReplicationLag{}
	}
	return &clientv1.RegionReplicationLag{Available: true, Topics: int64(l.Topics), BacklogMessages: l.BacklogMessages,
		BacklogBytes: l.BacklogBytes, MaxLagMs: l.MaxLag.Milliseconds(), Stalled: int64(l.Stalled)}
}

// probeRegion checks that one of the region's brokers answers a gRPC
// Lookup (through the broker's dial rewrite, as replication traffic goes)
// and fills in the reachability fields of rs.
func (s *Server) probeRegion(ctx context.Context, rs *clientv1.RegionStatus) {
	rs.HealthSource = "probe"
	eps := rs.Endpoints
	if len(eps) > regionProbeEndpoints {
		eps = eps[:regionProbeEndpoints]
	}
	if len(eps) == 0 {
		rs.HealthError = "no registered endpoint"
	}
	for _, ep := range eps {
		if err := s.probeEndpoint(ctx, ep); err != nil {
			rs.HealthError = ep + ": " + err.Error()
			continue
		}
		rs.Reachable, rs.HealthError = true, ""
		s.probes.seen(rs.Name, time.Now())
		break
	}
	if at, ok := s.probes.last(rs.Name); ok {
		rs.LastSeenMs = at.UnixMilli()
	}
}

// probeEndpoint returns nil when the broker at addr answers a Lookup at
// all (the probe's invalid name makes the answer an error by design).
func (s *Server) probeEndpoint(ctx context.Context, addr string) error {
	cc, err := s.peer(addr)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, regionProbeTimeout)
	defer cancel()
	_, err = clientv1.NewMeridianClient(cc).Lookup(pctx, &clientv1.LookupRequest{Topic: probeTopic})
	switch status.Code(err) {
	case codes.OK, codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition:
		return nil
	}
	return err
}

// replicationLagTo sums the replicators of this broker's topics towards
// region: the default ReplicationLagFunc.
func (s *Server) replicationLagTo(region string) (ReplicationLag, bool) {
	var l ReplicationLag
	for _, t := range s.loadedTopics() {
		for _, st := range t.replicatorStats() {
			if st.GetRemoteRegion() != region {
				continue
			}
			l.Topics++
			l.BacklogMessages += st.GetBacklogEntries()
			l.BacklogBytes += st.GetBacklogBytes()
			l.MaxLag = max(l.MaxLag, time.Duration(st.GetLagSeconds()*float64(time.Second)))
			if st.GetStalled() {
				l.Stalled++
			}
		}
	}
	return l, l.Topics > 0
}
