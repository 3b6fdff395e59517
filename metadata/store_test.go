package metadata_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// stores runs a test against the in-process store and against the gRPC
// client of a single node, so both implementations meet the same contract.
func stores(t *testing.T, test func(t *testing.T, s metadata.Store)) {
	t.Run("local", func(t *testing.T) {
		test(t, metadatatest.Start(t))
	})
	t.Run("grpc", func(t *testing.T) {
		c := metadatatest.StartClusterWith(t, 1, metadatatest.Options{GRPC: true})
		test(t, newClient(t, c.Endpoints(), metadata.GlobalShard))
	})
}

func newClient(t testing.TB, endpoints []string, shard string) *metadata.Client {
	t.Helper()
	cl, err := metadata.NewClient(context.Background(), endpoints, shard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestPutGetDeleteCAS(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		ctx := ctxT(t)
		kv := must[metadata.KV](t)(s.Put(ctx, "a", []byte("1"), metadata.MustNotExist, 0))
		if kv.Version != 1 || kv.CreateRevision != kv.ModRevision || string(kv.Value) != "1" {
			t.Fatalf("create: %+v", kv)
		}
		if _, err := s.Put(ctx, "a", []byte("x"), metadata.MustNotExist, 0); !errors.Is(err, metadata.ErrVersionMismatch) {
			t.Fatalf("MustNotExist on existing key: %v", err)
		}
		if _, err := s.Put(ctx, "a", []byte("x"), 7, 0); !errors.Is(err, metadata.ErrVersionMismatch) || !strings.Contains(err.Error(), `"a"`) {
			t.Fatalf("wrong version: %v", err)
		}
		kv2 := must[metadata.KV](t)(s.Put(ctx, "a", []byte("2"), 1, 0))
		if kv2.Version != 2 || kv2.ModRevision <= kv.ModRevision || kv2.CreateRevision != kv.CreateRevision {
			t.Fatalf("update: %+v after %+v", kv2, kv)
		}
		kv3 := must[metadata.KV](t)(s.Put(ctx, "a", []byte("3"), metadata.AnyVersion, 0))
		if kv3.Version != 3 {
			t.Fatalf("any-version update: %+v", kv3)
		}
		got := must[metadata.KV](t)(s.Get(ctx, "a", metadata.ReadOptions{}))
		if string(got.Value) != "3" || got.Version != 3 {
			t.Fatalf("get: %+v", got)
		}
		stale := must[metadata.KV](t)(s.Get(ctx, "a", metadata.ReadOptions{Stale: true}))
		if stale.Version != 3 { // single replica: the local state is current
			t.Fatalf("stale get: %+v", stale)
		}
		if _, err := s.Get(ctx, "missing", metadata.ReadOptions{}); !errors.Is(err, metadata.ErrNotFound) {
			t.Fatalf("get missing: %v", err)
		}
		if err := s.Delete(ctx, "a", 2); !errors.Is(err, metadata.ErrVersionMismatch) {
			t.Fatalf("delete wrong version: %v", err)
		}
		if err := s.Delete(ctx, "a", 3); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "a", metadata.AnyVersion); !errors.Is(err, metadata.ErrNotFound) {
			t.Fatalf("delete missing: %v", err)
		}
		kv4 := must[metadata.KV](t)(s.Put(ctx, "a", nil, metadata.MustNotExist, 0))
		if kv4.Version != 1 || kv4.CreateRevision <= kv3.ModRevision {
			t.Fatalf("recreate: %+v", kv4)
		}
	})
}

func TestListPaging(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		ctx := ctxT(t)
		var want []string
		for i := range 25 {
			k := fmt.Sprintf("p/%02d", i)
			want = append(want, k)
			must[metadata.KV](t)(s.Put(ctx, k, []byte(k), metadata.MustNotExist, 0))
		}
		must[metadata.KV](t)(s.Put(ctx, "o", nil, 0, 0))
		must[metadata.KV](t)(s.Put(ctx, "q/1", nil, 0, 0))
		var got []string
		page := metadata.Page{Limit: 10}
		pages := 0
		for {
			res := must[metadata.ListResult](t)(s.List(ctx, "p/", page, metadata.ReadOptions{}))
			pages++
			for _, kv := range res.KVs {
				got = append(got, kv.Key)
				if string(kv.Value) != kv.Key {
					t.Fatalf("value of %s: %q", kv.Key, kv.Value)
				}
			}
			if res.Revision < 27 {
				t.Fatalf("revision %d", res.Revision)
			}
			if !res.More {
				break
			}
			page.After = res.KVs[len(res.KVs)-1].Key
		}
		if pages != 3 || strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("pages %d, keys %v", pages, got)
		}
		all := must[metadata.ListResult](t)(s.List(ctx, "", metadata.Page{}, metadata.ReadOptions{Stale: true}))
		if len(all.KVs) != 27 || all.More {
			t.Fatalf("list all: %d keys, more %v", len(all.KVs), all.More)
		}
		exact := must[metadata.ListResult](t)(s.List(ctx, "p/", metadata.Page{Limit: 25}, metadata.ReadOptions{}))
		if len(exact.KVs) != 25 || exact.More {
			t.Fatalf("exact page: %d keys, more %v", len(exact.KVs), exact.More)
		}
	})
}

func TestTxnAllOrNothing(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		ctx := ctxT(t)
		a := must[metadata.KV](t)(s.Put(ctx, "t/a", []byte("a1"), 0, 0))
		b := must[metadata.KV](t)(s.Put(ctx, "t/b", []byte("b1"), 0, 0))
		// One stale guard: nothing applies.
		_, err := s.Txn(ctx, []metadata.Op{
			{Type: metadata.OpPut, Key: "t/a", Value: []byte("a2"), ExpectedVersion: a.Version},
			{Type: metadata.OpDelete, Key: "t/b", ExpectedVersion: b.Version},
			{Type: metadata.OpPut, Key: "t/c", Value: []byte("c1"), ExpectedVersion: metadata.MustNotExist},
			{Type: metadata.OpCheck, Key: "t/d", ExpectedVersion: 5},
		})
		if !errors.Is(err, metadata.ErrVersionMismatch) || !strings.Contains(err.Error(), "t/d") {
			t.Fatalf("txn with failing guard: %v", err)
		}
		res := must[metadata.ListResult](t)(s.List(ctx, "t/", metadata.Page{}, metadata.ReadOptions{}))
		if len(res.KVs) != 2 || string(res.KVs[0].Value) != "a1" || res.KVs[0].Version != 1 || res.KVs[1].Key != "t/b" {
			t.Fatalf("after failed txn: %+v", res.KVs)
		}
		if res.Revision != b.ModRevision {
			t.Fatalf("failed txn moved the revision: %d != %d", res.Revision, b.ModRevision)
		}
		kvs := must[[]metadata.KV](t)(s.Txn(ctx, []metadata.Op{
			{Type: metadata.OpPut, Key: "t/a", Value: []byte("a2"), ExpectedVersion: a.Version},
			{Type: metadata.OpDelete, Key: "t/b", ExpectedVersion: b.Version},
			{Type: metadata.OpPut, Key: "t/c", Value: []byte("c1"), ExpectedVersion: metadata.MustNotExist},
			{Type: metadata.OpCheck, Key: "t/d", ExpectedVersion: metadata.MustNotExist},
		}))
		if len(kvs) != 4 || kvs[0].Version != 2 || kvs[2].Version != 1 {
			t.Fatalf("txn results: %+v", kvs)
		}
		res = must[metadata.ListResult](t)(s.List(ctx, "t/", metadata.Page{}, metadata.ReadOptions{}))
		if len(res.KVs) != 2 || res.KVs[0].Key != "t/a" || string(res.KVs[0].Value) != "a2" || res.KVs[1].Key != "t/c" {
			t.Fatalf("after txn: %+v", res.KVs)
		}
		if res.Revision != b.ModRevision+3 {
			t.Fatalf("txn revision %d, want %d (one per change)", res.Revision, b.ModRevision+3)
		}
	})
}

func TestSessionsEphemeralOnClose(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		ctx := ctxT(t)
		sess := must[metadata.SessionID](t)(s.CreateSession(ctx, 10*time.Second))
		if sess == 0 {
			t.Fatal("session 0")
		}
		kv := must[metadata.KV](t)(s.Put(ctx, "owner/x", []byte("me"), metadata.MustNotExist, sess))
		if kv.Session != sess {
			t.Fatalf("session of key: %+v", kv)
		}
		must[metadata.KV](t)(s.Put(ctx, "persistent", []byte("p"), 0, 0))
		// Re-put without a session makes a key persistent.
		must[metadata.KV](t)(s.Put(ctx, "owner/y", nil, 0, sess))
		must[metadata.KV](t)(s.Put(ctx, "owner/y", nil, 0, 0))
		if err := s.KeepAlive(ctx, sess); err != nil {
			t.Fatal(err)
		}
		if err := s.CloseSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "owner/x", metadata.ReadOptions{}); !errors.Is(err, metadata.ErrNotFound) {
			t.Fatalf("ephemeral key after close: %v", err)
		}
		must[metadata.KV](t)(s.Get(ctx, "owner/y", metadata.ReadOptions{}))
		must[metadata.KV](t)(s.Get(ctx, "persistent", metadata.ReadOptions{}))
		if err := s.KeepAlive(ctx, sess); !errors.Is(err, metadata.ErrSessionExpired) {
			t.Fatalf("keepalive after close: %v", err)
		}
		if _, err := s.Put(ctx, "owner/z", nil, 0, sess); !errors.Is(err, metadata.ErrSessionExpired) {
			t.Fatalf("put with closed session: %v", err)
		}
		if err := s.CloseSession(ctx, sess); !errors.Is(err, metadata.ErrSessionExpired) {
			t.Fatalf("close twice: %v", err)
		}
		if _, err := s.Put(ctx, "owner/z", nil, 0, 12345); !errors.Is(err, metadata.ErrSessionExpired) {
			t.Fatalf("put with unknown session: %v", err)
		}
	})
}

func TestSessionExpiry(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		ctx := ctxT(t)
		const ttl = 2 * time.Second
		sess := must[metadata.SessionID](t)(s.CreateSession(ctx, ttl))
		must[metadata.KV](t)(s.Put(ctx, "eph", []byte("1"), 0, sess))
		evc, _ := s.Watch(ctx, "eph", 0)
		if ev := <-evc; ev.Type != metadata.EventPut {
			t.Fatalf("first event %+v", ev)
		}
		// Kept alive for 2 TTLs: the key stays.
		for range 8 {
			time.Sleep(500 * time.Millisecond)
			if err := s.KeepAlive(ctx, sess); err != nil {
				t.Fatalf("keepalive: %v", err)
			}
		}
		must[metadata.KV](t)(s.Get(ctx, "eph", metadata.ReadOptions{}))
		// No keep-alives: the leader's tick expires it.
		start := time.Now()
		select {
		case ev := <-evc:
			if ev.Type != metadata.EventDelete || ev.KV.Key != "eph" {
				t.Fatalf("expiry event %+v", ev)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("session did not expire")
		}
		if d := time.Since(start); d < ttl/2 {
			t.Fatalf("expired after %v, before its TTL", d)
		}
		if _, err := s.Get(ctx, "eph", metadata.ReadOptions{}); !errors.Is(err, metadata.ErrNotFound) {
			t.Fatalf("after expiry: %v", err)
		}
		if err := s.KeepAlive(ctx, sess); !errors.Is(err, metadata.ErrSessionExpired) {
			t.Fatalf("keepalive after expiry: %v", err)
		}
	})
}

// collect reads n events or fails.
func collect(t testing.TB, evc <-chan metadata.Event, n int) []metadata.Event {
	t.Helper()
	var out []metadata.Event
	timeout := time.After(20 * time.Second)
	for len(out) < n {
		select {
		case ev, ok := <-evc:
			if !ok {
				t.Fatalf("watch closed after %d of %d events", len(out), n)
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatalf("got %d of %d events", len(out), n)
		}
	}
	return out
}

func TestWatchOrderAndResume(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		ctx := ctxT(t)
		base := must[metadata.ListResult](t)(s.List(ctx, "", metadata.Page{Limit: 1}, metadata.ReadOptions{})).Revision
		wctx, cancel := context.WithCancel(ctx)
		evc, errc := s.Watch(wctx, "w/", base)
		for i := range 30 {
			must[metadata.KV](t)(s.Put(ctx, fmt.Sprintf("w/%d", i%7), []byte{byte(i)}, 0, 0))
			must[metadata.KV](t)(s.Put(ctx, fmt.Sprintf("other/%d", i), nil, 0, 0))
		}
		must[[]metadata.KV](t)(s.Txn(ctx, []metadata.Op{{Type: metadata.OpDelete, Key: "w/0"}, {Type: metadata.OpPut, Key: "w/x"}}))
		evs := collect(t, evc, 20)
		cancel()
		for range evc {
		}
		if err := <-errc; err != nil {
			t.Fatalf("watch ended with %v", err)
		}
		last := evs[len(evs)-1].Revision
		// Resume after the last revision seen, while writes go on.
		evc2, _ := s.Watch(ctx, "w/", last)
		evs = append(evs, collect(t, evc2, 12)...)
		prev := base
		for i, ev := range evs {
			if ev.Revision <= prev {
				t.Fatalf("event %d revision %d after %d", i, ev.Revision, prev)
			}
			prev = ev.Revision
			if !strings.HasPrefix(ev.KV.Key, "w/") {
				t.Fatalf("event outside prefix: %+v", ev)
			}
			if i < 30 && (ev.Type != metadata.EventPut || ev.KV.Key != fmt.Sprintf("w/%d", i%7) || !bytes.Equal(ev.KV.Value, []byte{byte(i)})) {
				t.Fatalf("event %d: %+v", i, ev)
			}
		}
		if evs[30].Type != metadata.EventDelete || evs[30].KV.Key != "w/0" || evs[31].KV.Key != "w/x" {
			t.Fatalf("txn events: %+v %+v", evs[30], evs[31])
		}
	})
}

func TestWatchCompacted(t *testing.T) {
	c := metadatatest.StartClusterWith(t, 1, metadatatest.Options{Configure: func(_ int, cfg *metadata.NodeConfig) {
		cfg.HistoryEvents = 10
	}})
	s := c.Store(0, metadata.GlobalShard)
	ctx := ctxT(t)
	for i := range 30 {
		must[metadata.KV](t)(s.Put(ctx, "k", []byte{byte(i)}, 0, 0))
	}
	evc, errc := s.Watch(ctx, "", 5)
	for range evc {
	}
	if err := <-errc; !errors.Is(err, metadata.ErrCompacted) {
		t.Fatalf("watch from compacted revision: %v", err)
	}
	evs := collect(t, func() <-chan metadata.Event { c, _ := s.Watch(ctx, "", 20); return c }(), 10)
	if evs[0].Revision != 21 || evs[9].Revision != 30 {
		t.Fatalf("retained history: %d..%d", evs[0].Revision, evs[9].Revision)
	}
}

func TestBadInput(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		ctx := ctxT(t)
		long := strings.Repeat("k", metadata.MaxKeyBytes+1)
		big := make([]byte, 1<<20+1)
		cases := []struct {
			name  string
			err   error
			field string
			do    func() error
		}{
			{"empty key", nil, "key is empty", func() error { _, err := s.Put(ctx, "", nil, 0, 0); return err }},
			{"long key", nil, "key is 1025 bytes, limit 1024", func() error { _, err := s.Put(ctx, long, nil, 0, 0); return err }},
			{"long get", nil, "limit 1024", func() error { _, err := s.Get(ctx, long, metadata.ReadOptions{}); return err }},
			{"big value", nil, "value is 1048577 bytes, limit 1048576", func() error { _, err := s.Put(ctx, "v", big, 0, 0); return err }},
			{"bad version", nil, "expected_version -2", func() error { _, err := s.Put(ctx, "v", nil, -2, 0); return err }},
			{"page limit", nil, "page.limit 1001", func() error {
				_, err := s.List(ctx, "", metadata.Page{Limit: 1001}, metadata.ReadOptions{})
				return err
			}},
			{"empty txn", nil, "ops is empty", func() error { _, err := s.Txn(ctx, nil); return err }},
			{"txn dup", nil, "repeats", func() error {
				_, err := s.Txn(ctx, []metadata.Op{{Type: metadata.OpPut, Key: "d"}, {Type: metadata.OpPut, Key: "d"}})
				return err
			}},
			{"txn big value", nil, "ops[1].value is 1048577 bytes", func() error {
				_, err := s.Txn(ctx, []metadata.Op{{Type: metadata.OpPut, Key: "d"}, {Type: metadata.OpPut, Key: "e", Value: big}})
				return err
			}},
			{"txn bad type", nil, "ops[0].type 9", func() error {
				_, err := s.Txn(ctx, []metadata.Op{{Type: 9, Key: "d"}})
				return err
			}},
			{"ttl", nil, "ttl 1ms", func() error { _, err := s.CreateSession(ctx, time.Millisecond); return err }},
			{"session 0", nil, "session must be non-zero", func() error { return s.KeepAlive(ctx, 0) }},
		}
		for _, tc := range cases {
			err := tc.do()
			if !errors.Is(err, metadata.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("%s: got %v, want ErrInvalidArgument naming %q", tc.name, err, tc.field)
			}
		}
		res := must[metadata.ListResult](t)(s.List(ctx, "", metadata.Page{}, metadata.ReadOptions{}))
		if len(res.KVs) != 0 || res.Revision != 0 {
			t.Fatalf("bad input changed the store: %+v", res)
		}
		// The limits themselves are accepted.
		maxKey := strings.Repeat("m", metadata.MaxKeyBytes)
		kv := must[metadata.KV](t)(s.Put(ctx, maxKey, big[:1<<20], metadata.MustNotExist, 0))
		got := must[metadata.KV](t)(s.Get(ctx, maxKey, metadata.ReadOptions{}))
		if kv.Version != 1 || len(got.Value) != 1<<20 {
			t.Fatalf("max-size key and value: version %d, %d bytes", kv.Version, len(got.Value))
		}
	})
}

func TestUnknownShard(t *testing.T) {
	c := metadatatest.StartClusterWith(t, 1, metadatatest.Options{GRPC: true, Shards: []string{"global", "eu"}})
	if _, err := c.Node(0).Store("us"); !errors.Is(err, metadata.ErrInvalidArgument) || !strings.Contains(err.Error(), `"us"`) {
		t.Fatalf("local unknown shard: %v", err)
	}
	cl := newClient(t, c.Endpoints(), "us")
	ctx := ctxT(t)
	if _, err := cl.Put(ctx, "k", nil, 0, 0); !errors.Is(err, metadata.ErrInvalidArgument) || !strings.Contains(err.Error(), `"us"`) {
		t.Fatalf("remote unknown shard: %v", err)
	}
	// Shards are independent.
	eu := newClient(t, c.Endpoints(), "eu")
	must[metadata.KV](t)(eu.Put(ctx, "k", []byte("eu"), 0, 0))
	if _, err := cl.ForShard("global").Get(ctx, "k", metadata.ReadOptions{}); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("global sees eu's key: %v", err)
	}
}
