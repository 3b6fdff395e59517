package metadata

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/raftio"
	metadatav1 "github.com/meridianmq/meridian/api/metadata/v1"
)

// NodeStatus is one metadata node's view of the shards it hosts.
type NodeStatus struct {
	// Endpoint is the node's gRPC address as the asker dialled it ("" for
	// an in-process node).
	Endpoint string `json:"endpoint,omitempty"`
	// Error is set when the node could not be asked; the rest is then zero.
	Error       string        `json:"error,omitempty"`
	NodeID      uint64        `json:"node_id"`
	RaftAddress string        `json:"raft_address"`
	Shards      []ShardStatus `json:"shards"`
}

// ShardStatus is one hosted shard as a node sees it.
type ShardStatus struct {
	Name    string `json:"name"`
	ShardID uint64 `json:"shard_id"`
	// LeaderID is the leader's replica ID (0 = no leader known).
	LeaderID uint64 `json:"leader_id"`
	// LeaderAddress is the leader's Raft address ("" if unknown).
	LeaderAddress string `json:"leader_address"`
	Term          uint64 `json:"term"`
	// IsLeader reports whether this node leads the shard.
	IsLeader bool `json:"is_leader"`
	// Members maps replica IDs to Raft addresses.
	Members map[uint64]string `json:"members"`
}

// StatusReporter is implemented by the stores that can say who leads the
// metadata shards: the in-process store (its node's view) and the gRPC
// Client (the view of every endpoint it knows).
type StatusReporter interface {
	// NodeStatuses asks every metadata node the store knows. A node that
	// cannot be asked is reported with Error set; the call itself does not
	// fail.
	NodeStatuses(ctx context.Context) []NodeStatus
}

var (
	_ StatusReporter = (*shardStore)(nil)
	_ StatusReporter = (*Client)(nil)
)

// Status returns this node's view of its shards, in config order.
func (n *Node) Status() (NodeStatus, error) {
	if !n.isStarted() {
		return NodeStatus{}, fmt.Errorf("%w: node not started", ErrUnavailable)
	}
	members := map[uint64]map[uint64]string{}
	if info := n.nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{SkipLogInfo: true}); info != nil {
		for _, si := range info.ShardInfoList {
			if len(si.Replicas) > 0 {
				members[si.ShardID] = maps.Clone(si.Replicas)
			}
		}
	}
	out := NodeStatus{NodeID: n.cfg.NodeID, RaftAddress: n.cfg.RaftAddress, Endpoint: n.GRPCAddr()}
	for _, sc := range n.cfg.Shards {
		ss := ShardStatus{Name: sc.Name, ShardID: sc.ShardID, Members: members[sc.ShardID]}
		if ss.Members == nil {
			ss.Members = maps.Clone(sc.Members)
		}
		if id, term, valid, err := n.nh.GetLeaderID(sc.ShardID); err == nil && valid && id != 0 {
			ss.LeaderID, ss.Term = id, term
			ss.LeaderAddress = ss.Members[id]
			ss.IsLeader = id == n.cfg.NodeID
		}
		out.Shards = append(out.Shards, ss)
	}
	return out, nil
}

// NodeStatuses implements StatusReporter: the status of the node this
// store lives in.
func (s *shardStore) NodeStatuses(context.Context) []NodeStatus {
	st, err := s.node.Status()
	if err != nil {
		return []NodeStatus{{Error: err.Error()}}
	}
	st.Endpoint = ""
	return []NodeStatus{st}
}

// NodeStatuses implements StatusReporter: it asks every endpoint in
// parallel, each bounded by ctx (or the request timeout).
func (c *Client) NodeStatuses(ctx context.Context) []NodeStatus {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.RequestTimeout)
		defer cancel()
	}
	out := make([]NodeStatus, len(c.pool.clients))
	var wg sync.WaitGroup
	for i, mc := range c.pool.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = NodeStatus{Endpoint: c.pool.endpoints[i]}
			r, err := mc.Status(ctx, &metadatav1.StatusRequest{})
			if err != nil {
				out[i].Error = FromStatus(err).Error()
				return
			}
			out[i] = statusFromPB(r)
			out[i].Endpoint = c.pool.endpoints[i]
		}()
	}
	wg.Wait()
	return out
}

func statusToPB(st NodeStatus) *metadatav1.StatusResponse {
	r := &metadatav1.StatusResponse{NodeId: st.NodeID, RaftAddress: st.RaftAddress}
	for _, s := range st.Shards {
		r.Shards = append(r.Shards, &metadatav1.ShardStatus{
			Name: s.Name, ShardId: s.ShardID, LeaderId: s.LeaderID, LeaderAddress: s.LeaderAddress,
			Term: s.Term, IsLeader: s.IsLeader, Members: maps.Clone(s.Members),
		})
	}
	return r
}

func statusFromPB(r *metadatav1.StatusResponse) NodeStatus {
	st := NodeStatus{NodeID: r.GetNodeId(), RaftAddress: r.GetRaftAddress()}
	for _, s := range r.GetShards() {
		st.Shards = append(st.Shards, ShardStatus{
			Name: s.GetName(), ShardID: s.GetShardId(), LeaderID: s.GetLeaderId(), LeaderAddress: s.GetLeaderAddress(),
			Term: s.GetTerm(), IsLeader: s.GetIsLeader(), Members: maps.Clone(s.GetMembers()),
		})
	}
	return st
}

// Status implements metadatav1.MetadataServer.
func (s *service) Status(context.Context, *metadatav1.StatusRequest) (*metadatav1.StatusResponse, error) {
	st, err := s.node.Status()
	if err != nil {
		return nil, ToStatus(err)
	}
	return statusToPB(st), nil
}

// leaderListener feeds Dragonboat's leader notifications to the metrics and
// the log.
type leaderListener struct{ n *Node }

// LeaderUpdated implements raftio.IRaftEventListener. Dragonboat calls it
// for this node's replicas only, whenever the leader they know changes.
func (l leaderListener) LeaderUpdated(info raftio.LeaderInfo) {
	name := fmt.Sprint(info.ShardID)
	var members map[uint64]string
	for _, sc := range l.n.cfg.Shards {
		if sc.ShardID == info.ShardID {
			name, members = sc.Name, sc.Members
		}
	}
	m := l.n.metrics
	m.leaderChanges.WithLabelValues(name).Inc()
	hasLeader, isLeader := 0.0, 0.0
	if info.LeaderID != 0 {
		hasLeader = 1
	}
	if info.LeaderID != 0 && info.LeaderID == l.n.cfg.NodeID {
		isLeader = 1
	}
	m.hasLeader.WithLabelValues(name).Set(hasLeader)
	m.isLeader.WithLabelValues(name).Set(isLeader)
	if info.LeaderID == 0 {
		l.n.log.Info("metadata shard has no leader", "shard", name, "term", info.Term)
		return
	}
	l.n.log.Info("metadata shard leader changed", "shard", name, "leader", info.LeaderID,
		"leader_address", members[info.LeaderID], "term", info.Term, "this_node", isLeader == 1)
}
