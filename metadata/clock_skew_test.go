package metadata_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
)

// skewClock is the wall clock plus an offset a test can change.
type skewClock struct{ off atomic.Int64 }

func (c *skewClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

// TestSessionClockSkew runs 3 nodes where one follower's clock is 10 s
// ahead and proposes all the time. Sessions kept alive through the other
// nodes must not expire early; sessions left alone must still expire, also
// one created through the fast node. Before the fix, the fast node's
// proposals moved the state machine's clock 10 s ahead and every
// keep-alive of the others failed with "session expired".
func TestSessionClockSkew(t *testing.T) {
	for attempt := 1; ; attempt++ {
		if runClockSkew(t) {
			return
		}
		// The fast node led the shard at some point: its ticks are the
		// session clock by design, so the scenario says nothing. Retry on a
		// fresh cluster.
		if attempt == 3 {
			t.Fatal("the fast node became leader in 3 attempts; cannot run the scenario")
		}
		t.Logf("attempt %d: the fast node became leader; retrying", attempt)
	}
}

func runClockSkew(t *testing.T) bool {
	const (
		skew = 10 * time.Second
		ttl  = 3 * time.Second
		run  = 6 * time.Second
	)
	clocks := []*skewClock{{}, {}, {}}
	c := metadatatest.StartClusterWith(t, 3, metadatatest.Options{Configure: func(i int, cfg *metadata.NodeConfig) {
		cfg.Expert.Clock = clocks[i]
		// Slower elections: a spurious one on a busy machine could make
		// the fast node leader.
		cfg.RTT = 50 * time.Millisecond
	}})
	ctx := ctxT(t)
	leader := c.Leader(metadata.GlobalShard)
	fast, normal := (leader+1)%3, (leader+2)%3
	clocks[fast].off.Store(int64(skew))
	t.Logf("leader node %d, fast node %d (+%v), normal node %d", leader+1, fast+1, skew, normal+1)

	// Sessions kept alive through the leader and the normal follower.
	type kept struct {
		node int
		id   metadata.SessionID
		key  string
	}
	var sessions []kept
	for _, i := range []int{leader, normal} {
		st := c.Store(i, metadata.GlobalShard)
		id := must[metadata.SessionID](t)(st.CreateSession(ctx, ttl))
		key := fmt.Sprintf("eph/kept-%d", i+1)
		must[metadata.KV](t)(st.Put(ctx, key, []byte("x"), metadata.MustNotExist, id))
		sessions = append(sessions, kept{i, id, key})
	}

	var fastLed atomic.Bool
	var wg sync.WaitGroup
	stop := make(chan struct{})
	keepErrs := make(chan error, 100)
	wg.Add(2)
	go func() { // keep-alives every 300 ms, and watch who leads
		defer wg.Done()
		for {
			for _, s := range sessions {
				kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := c.Store(s.node, metadata.GlobalShard).KeepAlive(kctx, s.id)
				cancel()
				if err != nil && !errors.Is(err, metadata.ErrUnknownOutcome) && !errors.Is(err, metadata.ErrUnavailable) {
					select {
					case keepErrs <- fmt.Errorf("keep-alive of session %d via node %d: %w", s.id, s.node+1, err):
					default:
					}
				}
			}
			for i := range 3 {
				if id, ok := c.Node(i).LeaderID(metadata.GlobalShard); ok && int(id) == fast+1 {
					fastLed.Store(true)
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	go func() { // the fast node proposes all the time
		defer wg.Done()
		st := c.Store(fast, metadata.GlobalShard)
		for i := 0; ; i++ {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, _ = st.Put(pctx, fmt.Sprintf("fast/%d", i%10), []byte("x"), metadata.AnyVersion, 0)
			cancel()
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	time.Sleep(run)
	close(stop)
	wg.Wait()
	if fastLed.Load() {
		return false
	}
	close(keepErrs)
	for err := range keepErrs {
		t.Error(err)
	}
	for _, s := range sessions {
		if _, err := c.Store(normal, metadata.GlobalShard).Get(ctx, s.key, metadata.ReadOptions{}); err != nil {
			t.Errorf("ephemeral key %s of a kept-alive session: %v", s.key, err)
		}
	}
	if t.Failed() {
		return true
	}

	// Time still advances: sessions left alone expire, also one created
	// through the fast node, and none before TTL minus the skew bound.
	maxSkew := metadata.DefaultNodeConfig().MaxClockSkew
	start := time.Now()
	for _, i := range []int{fast, normal} {
		st := c.Store(i, metadata.GlobalShard)
		id := must[metadata.SessionID](t)(st.CreateSession(ctx, ttl))
		must[metadata.KV](t)(st.Put(ctx, fmt.Sprintf("eph/idle-%d", i+1), []byte("x"), metadata.MustNotExist, id))
	}
	for _, i := range []int{fast, normal} {
		key := fmt.Sprintf("eph/idle-%d", i+1)
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := c.Store(leader, metadata.GlobalShard).Get(ctx, key, metadata.ReadOptions{})
			if errors.Is(err, metadata.ErrNotFound) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("session of %s created via node %d did not expire within 30 s (last err %v)", key, i+1, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		d := time.Since(start)
		t.Logf("session created via node %d expired after %v (TTL %v)", i+1, d.Round(time.Millisecond), ttl)
		if i == normal && d < ttl-maxSkew {
			t.Errorf("session created via normal node %d expired after %v, before TTL %v minus max_clock_skew %v", i+1, d, ttl, maxSkew)
		}
	}
	return !fastLed.Load()
}
