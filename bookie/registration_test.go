package bookie_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/meridianmq/meridian/bookie/bookietest"
	"github.com/meridianmq/meridian/internal/faultfs"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
	"github.com/meridianmq/meridian/topology"
)

func registry(t *testing.T, store metadata.Store) map[string]topology.BookieInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := store.List(ctx, topology.BookieRegistryPrefix, metadata.Page{}, metadata.ReadOptions{})
	if err != nil {
		t.Logf("list registry: %v", err)
		return nil
	}
	out := map[string]topology.BookieInfo{}
	for _, kv := range res.KVs {
		var bi topology.BookieInfo
		if err := json.Unmarshal(kv.Value, &bi); err != nil {
			t.Fatalf("registry value of %s: %v", kv.Key, err)
		}
		if kv.Session == 0 {
			t.Fatalf("registry key %s is not ephemeral", kv.Key)
		}
		out[bi.ID] = bi
	}
	return out
}

func TestRegistration(t *testing.T) {
	store := metadatatest.Start(t)
	c := bookietest.StartCluster(t, 2, bookietest.WithMetadata(store), bookietest.WithRacks("r1", "r2"), bookietest.WithRegion("eu"))
	reg := registry(t, store)
	if len(reg) != 2 {
		t.Fatalf("registry has %d bookies: %+v", len(reg), reg)
	}
	for i := range 2 {
		bi := reg[c.ID(i)]
		if bi.Address != c.Addr(i) || bi.Region != "eu" || bi.Rack != []string{"r1", "r2"}[i] || bi.ReadOnly {
			t.Fatalf("bookie %d registered as %+v", i, bi)
		}
	}
	// Going read-only is published.
	c.FaultFS(0).SetUsage(&faultfs.Usage{Total: 100, Free: 1})
	c.Server(0).CheckDisk()
	waitFor(t, 20*time.Second, "read_only in registry", func() bool { return registry(t, store)[c.ID(0)].ReadOnly })
	c.FaultFS(0).SetUsage(nil)
	c.Server(0).CheckDisk()
	waitFor(t, 20*time.Second, "writable in registry", func() bool {
		bi, ok := registry(t, store)[c.ID(0)]
		return ok && !bi.ReadOnly
	})
	// A clean stop deregisters at once; a crash when the session expires.
	c.Stop(1)
	waitFor(t, 10*time.Second, "bookie 1 gone", func() bool { _, ok := registry(t, store)[c.ID(1)]; return !ok })
	c.Kill(0)
	waitFor(t, 30*time.Second, "bookie 0 expired", func() bool { _, ok := registry(t, store)[c.ID(0)]; return !ok })
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "bookie 0 back", func() bool { _, ok := registry(t, store)[c.ID(0)]; return ok })
}

// unreachableFirst wraps a real store and fails its first n session
// creations, as a metadata service that is still starting would.
type unreachableFirst struct {
	metadata.Store
	mu sync.Mutex
	n  int
}

func (u *unreachableFirst) CreateSession(ctx context.Context, ttl time.Duration) (metadata.SessionID, error) {
	u.mu.Lock()
	fail := u.n > 0
	u.n--
	u.mu.Unlock()
	if fail {
		return 0, metadata.ErrUnavailable
	}
	return u.Store.CreateSession(ctx, ttl)
}

// A bookie starts even when the metadata store is not reachable yet and
// registers as soon as it is.
func TestRegistrationRetriesUntilMetadataReachable(t *testing.T) {
	store := metadatatest.Start(t)
	flaky := &unreachableFirst{Store: store, n: 3}
	c := bookietest.StartCluster(t, 1, bookietest.WithMetadata(flaky))
	if !c.Server(0).Registered() {
		t.Fatal("not registered")
	}
	if _, ok := registry(t, store)[c.ID(0)]; !ok {
		t.Fatal("registry key missing")
	}
}
