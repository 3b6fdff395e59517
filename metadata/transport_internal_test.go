package metadata

import (
	"context"
	"encoding/binary"
	"github.com/meridianmq/meridian/security"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dbconfig "github.com/lni/dragonboat/v4/config"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// recorder collects what a transport hands to Dragonboat.
type recorder struct {
	mu      sync.Mutex
	batches []pb.MessageBatch
	chunks  []pb.Chunk
	reject  atomic.Bool
}

func (r *recorder) batch(b pb.MessageBatch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, b)
}

func (r *recorder) chunk(c pb.Chunk) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.chunks = append(r.chunks, c)
	return !r.reject.Load()
}

func (r *recorder) counts() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.batches), len(r.chunks)
}

// newTestTransport starts a rewriting transport listening on a free port.
func newTestTransport(t *testing.T, rewrite map[string]string) (*rewriteTransport, *recorder) {
	t.Helper()
	return newTestTransportTLS(t, rewrite, nil)
}

// newTestTransportTLS is newTestTransport with TLS material (nil: none).
func newTestTransportTLS(t *testing.T, rewrite map[string]string, tl *security.TLS) (*rewriteTransport, *recorder) {
	t.Helper()
	rec := &recorder{}
	f := newRaftTransportFactory(rewrite, tl, slog.New(slog.DiscardHandler), newRaftTransportMetrics(nil), 0, nil)
	if !f.Validate("127.0.0.1:1") || f.Validate("nope") {
		t.Fatal("Validate accepts non host:port addresses or refuses host:port")
	}
	tr := f.Create(dbconfig.NodeHostConfig{RaftAddress: "127.0.0.1:0"}, rec.batch, rec.chunk).(*rewriteTransport)
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr, rec
}

func (t *rewriteTransport) addr() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lis.Addr().String()
}

func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRewriteTransportDeliversThroughRewrite sends message batches and a
// snapshot to a target name that only the rewrite map can reach, and
// checks that everything arrives intact, and that Close of the snapshot
// connection returns after the receiver took every chunk.
func TestRewriteTransportDeliversThroughRewrite(t *testing.T) {
	dst, rec := newTestTransport(t, nil)
	const target = "192.0.2.1:7000" // TEST-NET-1: never reachable itself
	src, _ := newTestTransport(t, map[string]string{target: dst.addr()})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	conn, err := src.GetConnection(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := range 3 {
		b := pb.MessageBatch{SourceAddress: "src", DeploymentId: 7, Requests: []pb.Message{{
			Type: pb.Replicate, ShardID: 1, From: 1, To: 2, Term: uint64(i + 1),
			Entries: []pb.Entry{{Index: uint64(i + 10), Term: 1, Cmd: []byte{byte(i), 1, 2, 3}}},
		}}}
		if err := conn.SendMessageBatch(b); err != nil {
			t.Fatal(err)
		}
	}
	pollUntil(t, "3 batches", func() bool { n, _ := rec.counts(); return n == 3 })
	rec.mu.Lock()
	for i, b := range rec.batches {
		m := b.Requests[0]
		// SourceAddress is cleared on receipt (decodeRaftBatch).
		if b.SourceAddress != "" || b.DeploymentId != 7 || m.Term != uint64(i+1) || m.Entries[0].Index != uint64(i+10) || m.Entries[0].Cmd[0] != byte(i) {
			t.Fatalf("batch %d arrived as %+v", i, b)
		}
	}
	rec.mu.Unlock()

	sc, err := src.GetSnapshotConnection(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3<<20) // larger than one read buffer
	for i := range data {
		data[i] = byte(i * 7)
	}
	for i := range 3 {
		if err := sc.SendChunk(pb.Chunk{ShardID: 1, ReplicaID: 2, From: 1, ChunkId: uint64(i), ChunkCount: 3, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	sc.Close()
	if _, n := rec.counts(); n != 3 {
		t.Fatalf("snapshot connection closed with %d of 3 chunks handed over", n)
	}
	rec.mu.Lock()
	for i, c := range rec.chunks {
		if c.ChunkId != uint64(i) || len(c.Data) != len(data) || c.Data[len(data)-1] != data[len(data)-1] {
			t.Fatalf("chunk %d arrived as id %d, %d bytes", i, c.ChunkId, len(c.Data))
		}
	}
	rec.mu.Unlock()
}

// TestRewriteTransportRejectedChunk: when Dragonboat rejects a chunk the
// receiver closes the connection, and the sender's writes fail.
func TestRewriteTransportRejectedChunk(t *testing.T) {
	dst, rec := newTestTransport(t, nil)
	rec.reject.Store(true)
	src, _ := newTestTransport(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sc, err := src.GetSnapshotConnection(ctx, dst.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	chunk := pb.Chunk{ShardID: 1, ReplicaID: 2, From: 1, ChunkCount: 1, Data: make([]byte, 64<<10)}
	pollUntil(t, "a send to fail after the rejection", func() bool { return sc.SendChunk(chunk) != nil })
	if _, n := rec.counts(); n != 1 {
		t.Fatalf("receiver took %d chunks after rejecting the first", n)
	}
}

// TestRewriteTransportCloseUnblocksSend: a peer that stops reading blocks
// a send; Close of the transport ends it at once, well before the write
// timeout.
func TestRewriteTransportCloseUnblocksSend(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		c, err := lis.Accept()
		if err == nil {
			defer c.Close()
			<-stop // accept, never read
		}
	}()
	src, _ := newTestTransport(t, nil)
	conn, err := src.GetConnection(context.Background(), lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	done := make(chan error, 1)
	big := pb.MessageBatch{Requests: []pb.Message{{Type: pb.Replicate, Entries: []pb.Entry{{Cmd: make([]byte, 1<<20)}}}}}
	go func() {
		for {
			if err := conn.SendMessageBatch(big); err != nil {
				done <- err
				return
			}
			sent.Add(1)
		}
	}()
	// Wait until the sends stop progressing: the socket buffers are full.
	last := int64(-1)
	pollUntil(t, "the send to block", func() bool {
		n := sent.Load()
		stuck := n == last && n > 0
		last = n
		time.Sleep(200 * time.Millisecond)
		return stuck
	})
	start := time.Now()
	_ = src.Close()
	select {
	case err := <-done:
		t.Logf("blocked send ended %v after Close: %v", time.Since(start), err)
	case <-time.After(raftWriteTimeout / 2):
		t.Fatal("Close did not unblock the send")
	}
}

// TestRewriteTransportRefusesBadInput: a bad preamble, a checksum mismatch
// and an oversized length each close the connection without handing
// anything to Dragonboat.
func TestRewriteTransportRefusesBadInput(t *testing.T) {
	dst, rec := newTestTransport(t, nil)
	frame := func(typ byte, n uint32, crc uint32, payload []byte) []byte {
		h := []byte{typ}
		h = binary.BigEndian.AppendUint32(h, n)
		h = binary.BigEndian.AppendUint32(h, crc)
		return append(h, payload...)
	}
	good := pb.MessageBatch{SourceAddress: "x"}
	gb, _ := good.Marshal()
	for name, body := range map[string][]byte{
		"bad magic":     []byte("XXXX\x01"),
		"bad kind":      []byte("MRT1\x09"),
		"bad checksum":  append([]byte("MRT1\x01"), frame(raftFrameBatch, uint32(len(gb)), 12345, gb)...),
		"too large":     append([]byte("MRT1\x01"), frame(raftFrameBatch, raftMaxFrame+1, 0, nil)...),
		"chunk on msgs": append([]byte("MRT1\x01"), frame(raftFrameChunk, 0, 0, nil)...),
	} {
		c, err := net.Dial("tcp", dst.addr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(body); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("%s: connection not closed by the receiver (read: %v)", name, err)
		}
		c.Close()
	}
	if b, ch := rec.counts(); b != 0 || ch != 0 {
		t.Fatalf("bad input delivered %d batches and %d chunks", b, ch)
	}
}
