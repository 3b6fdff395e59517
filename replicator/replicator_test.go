package replicator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// memSource is an in-memory log with a cursor (the twin of the broker's
// topic source).
type memSource struct {
	mu       sync.Mutex
	log      []Entry // log[i].Pos = {1, i}
	md       int64   // index of the last entry passed (-1: none)
	appended chan struct{}
}

func newMemSource() *memSource { return &memSource{md: -1, appended: make(chan struct{}, 1)} }

func (s *memSource) append(origin string, seq int64) {
	s.mu.Lock()
	i := int64(len(s.log))
	s.log = append(s.log, Entry{Pos: Position{1, i}, Data: []byte(fmt.Sprintf("%s/%d", origin, seq)), Origin: origin, OriginSeq: seq, Messages: 1,
		PublishMs: time.Now().UnixMilli()})
	s.mu.Unlock()
	select {
	case s.appended <- struct{}{}:
	default:
	}
}

func (s *memSource) ReadAfter(_ context.Context, p Position, maxN int) ([]Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	from := p.Entry + 1
	if from >= int64(len(s.log)) {
		return nil, nil
	}
	to := min(from+int64(maxN), int64(len(s.log)))
	return slices.Clone(s.log[from:to]), nil
}

func (s *memSource) MarkDelete(p Position) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.Entry < s.md {
		return fmt.Errorf("cursor moved back from %d to %d", s.md, p.Entry)
	}
	s.md = p.Entry
	return nil
}

func (s *memSource) MarkDeleted() Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Position{1, s.md}
}

func (s *memSource) Backlog() (int64, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.log)) - s.md - 1, 0
}

func (s *memSource) Appended() <-chan struct{} { return s.appended }

// memRemote applies entries idempotently per origin (the receiver's rules)
// and can reject or break streams.
type memRemote struct {
	region string
	mu     sync.Mutex
	stored []string
	high   map[string]int64
	// rejectNext rejects that many entries (one request at a time).
	rejectNext int
	// breakAfter ends the stream after this many more requests (0 = never).
	breakAfter int
	streams    int
}

func (r *memRemote) connect(ctx context.Context) (Conn, *clientv1.ReplicateOpened, error) {
	r.mu.Lock()
	r.streams++
	opened := &clientv1.ReplicateOpened{Applied: maps(r.high)}
	r.mu.Unlock()
	c := &memConn{r: r, ctx: ctx, acks: make(chan *clientv1.ReplicateResponse, 4096)}
	return c, opened, nil
}

func maps(m map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

type memConn struct {
	r      *memRemote
	ctx    context.Context
	acks   chan *clientv1.ReplicateResponse
	broken bool
	// poisoned: after a rejection every later entry of the stream is
	// rejected too (the receiver contract that keeps a direct origin's
	// entries without holes).
	poisoned bool
}

var errBroken = errors.New("stream broken")

func (c *memConn) Send(req *clientv1.ReplicateRequest) error {
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.broken {
		return errBroken
	}
	if r.breakAfter > 0 {
		r.breakAfter--
		if r.breakAfter == 0 {
			c.broken = true
			close(c.acks)
			return errBroken
		}
	}
	e := req.GetEntries()
	a := &clientv1.ReplicateAck{RequestId: e.GetRequestId()}
	rejecting := false
	for _, d := range e.GetEntries() {
		var origin string
		var seq int64
		fmt.Sscanf(string(d), "%1s/%d", &origin, &seq)
		if !rejecting && (r.rejectNext > 0 || c.poisoned) {
			rejecting = true
			c.poisoned = true
			r.rejectNext = max(r.rejectNext-1, 0)
		}
		switch {
		case rejecting:
			a.Results = append(a.Results, clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED)
			a.Error = &clientv1.Error{Message: "backlog quota exceeded"}
		case seq <= r.high[origin]:
			a.Results = append(a.Results, clientv1.ReplicateResult_REPLICATE_RESULT_DUPLICATE)
		default:
			r.stored = append(r.stored, string(d))
			r.high[origin] = seq
			a.Results = append(a.Results, clientv1.ReplicateResult_REPLICATE_RESULT_PERSISTED)
		}
	}
	a.Applied = maps(r.high)
	c.acks <- &clientv1.ReplicateResponse{Kind: &clientv1.ReplicateResponse_Ack{Ack: a}}
	return nil
}

func (c *memConn) Recv() (*clientv1.ReplicateResponse, error) {
	select {
	case a, ok := <-c.acks:
		if !ok {
			return nil, errBroken
		}
		return a, nil
	case <-c.ctx.Done():
		return nil, io.EOF
	}
}

func startTestReplicator(t *testing.T, src *memSource, remote *memRemote) *Replicator {
	t.Helper()
	r, err := New(Config{Self: "a", Remote: remote.region, Topic: "t", Source: src, Connect: remote.connect,
		Limits: Limits{RequestEntries: 7, MinWindow: 64, MaxWindow: 1 << 10}, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkExactlyOnce verifies that the remote stored origin a's entries
// 1..n once each, in order.
func checkExactlyOnce(t *testing.T, remote *memRemote, n int) {
	t.Helper()
	remote.mu.Lock()
	defer remote.mu.Unlock()
	var got []string
	for _, s := range remote.stored {
		if s[0] == 'a' {
			got = append(got, s)
		}
	}
	if len(got) != n {
		t.Fatalf("remote stored %d entries of a, want %d", len(got), n)
	}
	for i, s := range got {
		if want := fmt.Sprintf("a/%d", i+1); s != want {
			t.Fatalf("entry %d is %s, want %s", i, s, want)
		}
	}
}

func TestReplicatorShipsOnceThroughRejectionsAndBreaks(t *testing.T) {
	src := newMemSource()
	remote := &memRemote{region: "b", high: map[string]int64{}}
	const n = 500
	for i := range n / 2 {
		src.append("a", int64(i+1))
		if i%10 == 0 {
			src.append("b", int64(i+1)) // the remote's own entries: never sent back
		}
	}
	r := startTestReplicator(t, src, remote)
	remote.mu.Lock()
	remote.rejectNext = 3
	remote.breakAfter = 20
	remote.mu.Unlock()
	for i := n / 2; i < n; i++ {
		src.append("a", int64(i+1))
	}
	waitUntil(t, "backlog drained", func() bool { e, _ := src.Backlog(); return e == 0 })
	checkExactlyOnce(t, remote, n)
	remote.mu.Lock()
	for _, s := range remote.stored {
		if s[0] == 'b' {
			t.Fatalf("the remote's own entry %s was sent back to it", s)
		}
	}
	streams := remote.streams
	remote.mu.Unlock()
	st := r.Status()
	t.Logf("streams %d, reconnects %d, sent %d, last error %q", streams, st.Reconnects, st.SentEntries, st.LastError)
	// Entries persisted on a stream that broke before their ack arrived
	// come back DUPLICATE: they are not counted as sent by this replicator.
	if st.SentEntries > n || st.SentEntries < n/2 {
		t.Fatalf("SentEntries = %d, want <= %d (only acknowledged persisted entries count)", st.SentEntries, n)
	}
	if streams < 3 {
		t.Fatalf("want a new stream after each rejection and break, got %d streams", streams)
	}
}

func TestReplicatorStallRestarts(t *testing.T) {
	src := newMemSource()
	// A remote that never answers: the session stays open with requests
	// in flight and no progress.
	var streams int
	var mu sync.Mutex
	connect := func(ctx context.Context) (Conn, *clientv1.ReplicateOpened, error) {
		mu.Lock()
		streams++
		mu.Unlock()
		return &silentConn{ctx: ctx}, &clientv1.ReplicateOpened{}, nil
	}
	src.append("a", 1)
	r, err := New(Config{Self: "a", Remote: "b", Topic: "t", Source: src, Connect: connect, StallTimeout: 200 * time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.Start()
	defer r.Stop()
	waitUntil(t, "stall reported and session restarted", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return r.Status().Stalled && streams >= 2
	})
	if lag := r.Status().LagSeconds; lag < 0 {
		t.Fatalf("lag %v", lag)
	}
}

type silentConn struct{ ctx context.Context }

func (c *silentConn) Send(*clientv1.ReplicateRequest) error { return nil }
func (c *silentConn) Recv() (*clientv1.ReplicateResponse, error) {
	<-c.ctx.Done()
	return nil, io.EOF
}

// TestReplicatorAckTimeoutReconnects: a stream whose requests get no
// acknowledgement (a cut link stalls bytes, it does not fail them) is
// abandoned after the ack timeout, long before the stall timeout.
func TestReplicatorAckTimeoutReconnects(t *testing.T) {
	src := newMemSource()
	var streams int
	var mu sync.Mutex
	connect := func(ctx context.Context) (Conn, *clientv1.ReplicateOpened, error) {
		mu.Lock()
		streams++
		mu.Unlock()
		return &silentConn{ctx: ctx}, &clientv1.ReplicateOpened{}, nil
	}
	// Nothing to send: the idle probe is what goes unanswered.
	r, err := New(Config{Self: "a", Remote: "b", Topic: "t", Source: src, Connect: connect, StallTimeout: time.Hour,
		AckTimeout: 300 * time.Millisecond, IdleProbe: 100 * time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.Start()
	defer r.Stop()
	waitUntil(t, "a new stream after the ack timeout", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return streams >= 3
	})
	if st := r.Status(); !strings.Contains(st.LastError, "no acknowledgement") || st.Stalled {
		t.Fatalf("status %+v: want the ack timeout as last error, not a stall", st)
	}
}
