package topology

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
)

func register(t *testing.T, store metadata.Store, b BookieInfo, session metadata.SessionID) {
	t.Helper()
	val, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := store.Put(ctx, BookieRegistryPrefix+b.ID, val, metadata.AnyVersion, session); err != nil {
		t.Fatal(err)
	}
}

func bookieIDs(bs []BookieInfo) string {
	s := ""
	for i, b := range bs {
		if i > 0 {
			s += ","
		}
		s += b.ID
	}
	return s
}

func TestBookieRegistryListAndView(t *testing.T) {
	store := metadatatest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := store.CreateSession(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	register(t, store, BookieInfo{ID: "b1", Address: "127.0.0.1:1", Region: "us", Rack: "r1"}, sess)
	register(t, store, BookieInfo{ID: "b2", Address: "127.0.0.1:2", Region: "us", Rack: "r2", ReadOnly: true}, sess)
	// A broken entry is skipped, not fatal.
	if _, err := store.Put(ctx, BookieRegistryPrefix+"junk", []byte("{not json"), metadata.AnyVersion, 0); err != nil {
		t.Fatal(err)
	}

	all, rev, err := ListBookies(ctx, store, testLogger(t))
	if err != nil || rev <= 0 {
		t.Fatalf("ListBookies: %v rev %d", err, rev)
	}
	if got := bookieIDs(all); got != "b1,b2" {
		t.Fatalf("ListBookies = %s", got)
	}
	w, err := ListWritableBookies(ctx, store)
	if err != nil || bookieIDs(w) != "b1" {
		t.Fatalf("ListWritableBookies = %v, %v", bookieIDs(w), err)
	}

	v, err := NewBookieView(ctx, BookieViewConfig{Store: store, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if bookieIDs(v.Writable()) != "b1" || bookieIDs(v.All()) != "b1,b2" {
		t.Fatalf("view: all %s writable %s", bookieIDs(v.All()), bookieIDs(v.Writable()))
	}
	waitView := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for !cond() {
			select {
			case <-v.Changed():
			case <-time.After(100 * time.Millisecond):
			case <-deadline:
				t.Fatalf("view never reached: %s (all %s)", what, bookieIDs(v.All()))
			}
		}
	}
	// A new bookie appears; b2 turns writable.
	sess2, err := store.CreateSession(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	register(t, store, BookieInfo{ID: "b3", Address: "127.0.0.1:3", Region: "us", Rack: "r3"}, sess2)
	register(t, store, BookieInfo{ID: "b2", Address: "127.0.0.1:2", Region: "us", Rack: "r2"}, sess)
	waitView("b1,b2,b3 writable", func() bool { return bookieIDs(v.Writable()) == "b1,b2,b3" })
	// Closing b3's session removes its ephemeral registration.
	if err := store.CloseSession(ctx, sess2); err != nil {
		t.Fatal(err)
	}
	waitView("b3 gone", func() bool { return bookieIDs(v.All()) == "b1,b2" })
	if v.Revision() < rev {
		t.Fatalf("revision went back: %d < %d", v.Revision(), rev)
	}

	// Placement over the view's candidates.
	p := newRack(t, 2, true, nil, 1)
	ens, err := p.NewEnsemble(2, 2, 2, v.Writable(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckEnsemble(ens, 2, 2); err != nil {
		t.Fatal(err)
	}

	if _, err := NewBookieView(ctx, BookieViewConfig{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("missing store: %v", err)
	}
}

func TestBookieViewMembershipFilter(t *testing.T) {
	store := metadatatest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	register(t, store, BookieInfo{ID: "a", Address: "127.0.0.1:1", Region: "us", Rack: "r1"}, 0)
	register(t, store, BookieInfo{ID: "b", Address: "127.0.0.1:2", Region: "us", Rack: "r2"}, 0)
	a := startNode(t, "a", "r1", nil)
	b := startNode(t, "b", "r2", nil, a.Addr())
	waitFor(t, 20*time.Second, "a sees b", func() bool { return len(a.Members()) == 2 })
	v, err := NewBookieView(ctx, BookieViewConfig{Store: store, Membership: a})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if got := bookieIDs(v.Writable()); got != "a,b" {
		t.Fatalf("writable %s", got)
	}
	_ = b.Shutdown() // crash: registry still lists b, gossip declares it dead
	waitFor(t, 20*time.Second, "b no longer live", func() bool { return bookieIDs(v.Writable()) == "a" })
	if got := bookieIDs(v.All()); got != "a,b" {
		t.Fatalf("registry view changed: %s", got)
	}
}

// failingWatch wraps a real store and fails its first watches, as a
// compaction or a lost connection would.
type failingWatch struct {
	metadata.Store
	mu    sync.Mutex
	fails int
}

func (f *failingWatch) Watch(ctx context.Context, prefix string, after int64) (<-chan metadata.Event, <-chan error) {
	f.mu.Lock()
	fail := f.fails > 0
	f.fails--
	f.mu.Unlock()
	if !fail {
		return f.Store.Watch(ctx, prefix, after)
	}
	evs, errs := make(chan metadata.Event), make(chan error, 1)
	close(evs)
	errs <- metadata.ErrCompacted
	return evs, errs
}

func TestBookieViewRelistsAfterWatchError(t *testing.T) {
	real := metadatatest.Start(t)
	store := &failingWatch{Store: real, fails: 2}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	register(t, real, BookieInfo{ID: "a", Region: "us", Rack: "r1"}, 0)
	v, err := NewBookieView(ctx, BookieViewConfig{Store: store, RetryInterval: 50 * time.Millisecond, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	register(t, real, BookieInfo{ID: "b", Region: "us", Rack: "r2"}, 0)
	waitFor(t, 20*time.Second, "view sees b after watch failures", func() bool { return bookieIDs(v.All()) == "a,b" })
	// And the watch that finally works keeps it current.
	register(t, real, BookieInfo{ID: "c", Region: "us", Rack: "r3"}, 0)
	waitFor(t, 20*time.Second, "view sees c", func() bool { return bookieIDs(v.All()) == "a,b,c" })
}
