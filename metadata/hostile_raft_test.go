package metadata_test

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
)

// raftFrame builds one frame of the Meridian Raft transport: type, length,
// CRC-32C, payload (see metadata/transport.go).
func raftFrame(typ byte, payload []byte) []byte {
	h := make([]byte, 9, 9+len(payload))
	h[0] = typ
	binary.BigEndian.PutUint32(h[1:5], uint32(len(payload)))
	binary.BigEndian.PutUint32(h[5:9], crc32.Checksum(payload, crc32.MakeTable(crc32.Castagnoli)))
	return append(h, payload...)
}

// raftPreamble opens a connection of kind 1 (messages) or 2 (snapshot).
func raftPreamble(kind byte) []byte { return []byte{'M', 'R', 'T', '1', kind} }

func marshalBatch(t *testing.T, b pb.MessageBatch) []byte {
	t.Helper()
	out, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func marshalChunk(t *testing.T, c pb.Chunk) []byte {
	t.Helper()
	out, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRaftPortSurvivesHostileFrames sends a metadata cluster's Raft ports
// what crashed a node before every frame was validated, plus oversized
// headers and random bytes, and checks that every node stays up and the
// shard keeps its quorum. Before: a message to replica 0 panicked
// Dragonboat ("to field not set"), a message of a type replicas never
// send panicked its handler table, and a header announcing 256 MiB
// allocated 256 MiB.
func TestRaftPortSurvivesHostileFrames(t *testing.T) {
	c := metadatatest.StartCluster(t, 3)
	putVia(t, c, []int{0, 1, 2}, "/hostile/before", "v")

	shard := uint64(1) // the global shard of metadatatest
	// A batch Dragonboat's transport layer passes on: the default
	// deployment ID (1) and its binary version.
	batch := func(ms ...pb.Message) []byte {
		return raftFrame(1, marshalBatch(t, pb.MessageBatch{DeploymentId: 1, BinVer: raftio.TransportBinVersion, Requests: ms}))
	}
	// Dragonboat's own transport's header: magic 0xAE7D, then an 18-byte
	// header whose size field announces 1 TiB.
	dbHeader := make([]byte, 20)
	dbHeader[0], dbHeader[1] = 0xAE, 0x7D
	binary.BigEndian.PutUint64(dbHeader[4:12], 1<<40)
	huge := raftFrame(1, nil)
	binary.BigEndian.PutUint32(huge[1:5], 256<<20) // the limit itself, then nothing
	tooBig := raftFrame(1, nil)
	binary.BigEndian.PutUint32(tooBig[1:5], 1<<31)
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 64<<10)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}

	for i := range c.Size() {
		to := uint64(i + 1)
		attacks := map[string][]byte{
			"dragonboat header announcing 1 TiB": dbHeader,
			"header announcing 256 MiB, no body": append(raftPreamble(1), huge...),
			"header above the limit":             append(raftPreamble(1), tooBig...),
			"random bytes":                       random,
			"random bytes after a preamble":      append(raftPreamble(1), random...),
			"message to replica 0":               append(raftPreamble(1), batch(pb.Message{Type: pb.Heartbeat, ShardID: shard, From: 2, To: 0})...),
			"message from replica 0":             append(raftPreamble(1), batch(pb.Message{Type: pb.Heartbeat, ShardID: shard, From: 0, To: to})...),
			"message to shard 0":                 append(raftPreamble(1), batch(pb.Message{Type: pb.Heartbeat, ShardID: 0, From: 2, To: to})...),
			"message of unknown type":            append(raftPreamble(1), batch(pb.Message{Type: 99, ShardID: shard, From: 2, To: to, Term: 1 << 40})...),
			"local message type (tick)":          append(raftPreamble(1), batch(pb.Message{Type: pb.LocalTick, ShardID: shard, From: 2, To: to})...),
			"remote InstallSnapshot":             append(raftPreamble(1), batch(pb.Message{Type: pb.InstallSnapshot, ShardID: shard, From: 2, To: to, Term: 1 << 40})...),
			"source address of another replica": append(raftPreamble(1), raftFrame(1, marshalBatch(t, pb.MessageBatch{DeploymentId: 1, BinVer: raftio.TransportBinVersion,
				SourceAddress: "127.0.0.1:1", Requests: []pb.Message{{Type: pb.Heartbeat, ShardID: shard, From: 1 + to%3, To: to}}}))...),
			"snapshot chunk of replica 0": append(raftPreamble(2), raftFrame(2, marshalChunk(t, pb.Chunk{ShardID: shard, ReplicaID: 0, From: 2, ChunkCount: 1}))...),
			"snapshot chunk with chunk_id past chunk_count": append(raftPreamble(2),
				raftFrame(2, marshalChunk(t, pb.Chunk{ShardID: shard, ReplicaID: to, From: 2, ChunkId: 5, ChunkCount: 1}))...),
		}
		addr := c.Node(i).Config().RaftAddress
		for name, b := range attacks {
			sendAndClose(t, addr, name, b)
		}
	}
	// Every node is up and serves linearizable reads; writes commit
	// through each of them.
	c.WaitReady()
	for i := range c.Size() {
		putVia(t, c, []int{i}, fmt.Sprintf("/hostile/after-%d", i), "v")
	}
}

// sendAndClose writes b to addr and waits (bounded) for the node to close
// the connection.
func sendAndClose(t *testing.T, addr, name string, b []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("%s: dial %s: %v", name, addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(b); err != nil {
		t.Logf("%s: write: %v (the node closed first)", name, err)
	}
	// The node closes a connection it refuses, except one that announced
	// a body and sent none (it waits for the body under a deadline): ours
	// closes it then.
	_ = conn.(*net.TCPConn).CloseWrite()
	var one [1]byte
	_, _ = conn.Read(one[:])
}

// TestRaftTransportDragonboatRefused: Dragonboat's own TCP transport is
// refused by name.
func TestRaftTransportDragonboatRefused(t *testing.T) {
	cfg := metadata.DefaultNodeConfig()
	cfg.NodeID = 1
	cfg.RaftAddress = "127.0.0.1:1"
	cfg.DataDir = t.TempDir()
	cfg.Shards = []metadata.ShardConfig{{Name: metadata.GlobalShard, ShardID: 1, Members: map[uint64]string{1: "127.0.0.1:1"}}}
	cfg.RaftTransport = metadata.RaftTransportDragonboat
	if _, err := metadata.NewNode(cfg); err == nil {
		t.Fatal("raft_transport dragonboat was accepted")
	}
}
