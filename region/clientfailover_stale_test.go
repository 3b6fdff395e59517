package region_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/metadata"
)

// cutKeys wraps a broker's global store: while cut, every read, write and
// watch of the keys under prefix fails with metadata.ErrUnavailable, as for
// a region cut off from the global quorum (the broker keeps its policy
// cache's copy). Other keys are untouched.
type cutKeys struct {
	metadata.Store
	prefix string
	cut    atomic.Bool
	mu     sync.Mutex
	// watches are the cancels of the open watches of the prefix.
	watches []context.CancelFunc
}

func (s *cutKeys) hit(key string) bool { return s.cut.Load() && strings.HasPrefix(key, s.prefix) }

func (s *cutKeys) unavailable(key string) error {
	return fmt.Errorf("%w: test cut of %s", metadata.ErrUnavailable, key)
}

// Cut starts failing the prefix's keys and ends their open watches.
func (s *cutKeys) Cut() {
	s.cut.Store(true)
	s.mu.Lock()
	for _, c := range s.watches {
		c()
	}
	s.watches = nil
	s.mu.Unlock()
}

// Heal lets the prefix's keys through again.
func (s *cutKeys) Heal() { s.cut.Store(false) }

func (s *cutKeys) Get(ctx context.Context, key string, opts metadata.ReadOptions) (metadata.KV, error) {
	if s.hit(key) {
		return metadata.KV{}, s.unavailable(key)
	}
	return s.Store.Get(ctx, key, opts)
}

func (s *cutKeys) Put(ctx context.Context, key string, value []byte, v int64, sess metadata.SessionID) (metadata.KV, error) {
	if s.hit(key) {
		return metadata.KV{}, s.unavailable(key)
	}
	return s.Store.Put(ctx, key, value, v, sess)
}

func (s *cutKeys) List(ctx context.Context, prefix string, page metadata.Page, opts metadata.ReadOptions) (metadata.ListResult, error) {
	if s.hit(prefix) {
		return metadata.ListResult{}, s.unavailable(prefix)
	}
	return s.Store.List(ctx, prefix, page, opts)
}

func (s *cutKeys) Watch(ctx context.Context, prefix string, after int64) (<-chan metadata.Event, <-chan error) {
	if s.hit(prefix) {
		evs, errs := make(chan metadata.Event), make(chan error, 1)
		close(evs)
		errs <- s.unavailable(prefix)
		return evs, errs
	}
	if !strings.HasPrefix(prefix, s.prefix) {
		return s.Store.Watch(ctx, prefix, after)
	}
	wctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.watches = append(s.watches, cancel)
	s.mu.Unlock()
	inner, innerErr := s.Store.Watch(wctx, prefix, after)
	evs, errs := make(chan metadata.Event), make(chan error, 1)
	go func() {
		defer close(errs)
		defer close(evs)
		for ev := range inner {
			select {
			case evs <- ev:
			case <-wctx.Done():
			}
		}
		err := <-innerErr
		if ctx.Err() == nil && wctx.Err() != nil {
			err = s.unavailable(prefix) // ended by Cut
		}
		errs <- err
	}()
	return evs, errs
}

// TestClientFailoverIgnoresStaleTarget: region b is cut off from the
// global metadata (its failover group keys) and answers its last seen
// target (version N, region a), marked stale. A controlled client that
// has applied version N+1 (region b) from a stays in b when only b's stale
// answer reaches it; it follows N+2 (region a) as soon as a is reachable
// again, while b is still stale. Before, the client switched on any change
// of version, so b's stale N sent it back to a. Nothing acknowledged is
// lost.
func TestClientFailoverIgnoresStaleTarget(t *testing.T) {
	cutB := &cutKeys{prefix: "failover/"}
	g, topic := foSetupWith(t, geoOptions{broker: func(region string, _ int, cfg *broker.Config) {
		if region == "b" {
			cutB.Store = cfg.Global
			cfg.Global = cutB
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	admA, err := client.NewAdmin(ctx, g.url("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer admA.Close(ctx)
	admB, err := client.NewAdmin(ctx, g.url("b"))
	if err != nil {
		t.Fatal(err)
	}
	defer admB.Close(ctx)
	vN, err := admA.SetFailoverTarget(ctx, "grp", "a")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "version N fresh in b", func() bool {
		got, err := admB.GetFailoverTarget(ctx, "grp")
		return err == nil && got.GetVersion() == vN.GetVersion() && !got.GetStale() && got.GetConfirmedMs() > 0
	})

	fo := foTimings
	fo.Mode, fo.Group = client.FailoverControlled, "grp"
	w := startWorkload(t, g, topic, fo, proxyClientPath(t, g, "a"))
	w.waitProgress("a", 50, 30*time.Second)

	// b is cut off from the global metadata: it answers N, stale.
	cutB.Cut()
	waitFor(t, 10*time.Second, "b answers stale", func() bool {
		got, err := admB.GetFailoverTarget(ctx, "grp")
		return err == nil && got.GetStale() && got.GetVersion() == vN.GetVersion() && got.GetRegion() == "a"
	})
	vN1, err := admA.SetFailoverTarget(ctx, "grp", "b")
	if err != nil {
		t.Fatal(err)
	}
	w.waitSwitch("b", time.Now(), 20*time.Second)
	w.waitProgress("b", 50, 30*time.Second)

	// Only b's stale answer reaches the client now: version N < N+1.
	g.net.Cut("client", "a", false)
	ignored0 := clientCounter(t, w, "meridian_client_failover_target_ignored_total")
	waitFor(t, 20*time.Second, "the client ignoring b's stale target twice", func() bool {
		return clientCounter(t, w, "meridian_client_failover_target_ignored_total") >= ignored0+2
	})
	if r := w.cl.ActiveRegion(); r != "b" {
		t.Fatalf("client moved to %s on b's stale target (version %d < %d applied)", r, vN.GetVersion(), vN1.GetVersion())
	}
	st, ok := w.cl.FailoverTarget()
	if !ok || !st.Stale || st.From != "b" || st.Version != vN.GetVersion() || st.ConfirmedAt.IsZero() {
		t.Fatalf("client's last target %+v %v, want b's stale version %d with its confirmation time", st, ok, vN.GetVersion())
	}
	if ev := w.lastEvent(); ev.To != "b" {
		t.Fatalf("last failover event %+v, want the switch to b", ev)
	}
	w.waitProgress("b", 50, 30*time.Second)

	// N+2 (region a), while b is still stale: the client follows it once a
	// answers.
	vN2, err := admA.SetFailoverTarget(ctx, "grp", "a")
	if err != nil {
		t.Fatal(err)
	}
	g.net.Heal("client", "a")
	w.waitSwitch("a", time.Now(), 20*time.Second)
	if st, _ := w.cl.FailoverTarget(); st.Version != vN2.GetVersion() || st.Stale {
		t.Fatalf("client's last target %+v, want a's fresh version %d", st, vN2.GetVersion())
	}
	w.waitProgress("a", 50, 30*time.Second)
	cutB.Heal()
	waitFor(t, 15*time.Second, "b fresh again at N+2", func() bool {
		got, err := admB.GetFailoverTarget(ctx, "grp")
		return err == nil && !got.GetStale() && got.GetVersion() == vN2.GetVersion()
	})
	w.checkNoLoss(geoConverge)
	if _, err := admB.GetFailoverTarget(ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("unset group: %v, want ErrNotFound", err)
	}
}

// clientCounter returns the value of the client's counter name.
func clientCounter(t *testing.T, w *foWorkload, name string) float64 {
	t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
