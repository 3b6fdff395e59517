package metadata_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	metadatav1 "github.com/meridianmq/meridian/api/metadata/v1"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
	"github.com/meridianmq/meridian/security"
	"github.com/meridianmq/meridian/security/securitytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// wantLimit fails unless err is ErrLimitExceeded and its text has every want.
func wantLimit(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, metadata.ErrLimitExceeded) {
		t.Fatalf("%s: %v, want ErrLimitExceeded", what, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("%s: %q does not name %q", what, err, w)
		}
	}
}

// listAll returns the prefix's keys and values as "k=v" in key order.
func listAll(t *testing.T, s metadata.Store, prefix string) []string {
	t.Helper()
	res := must[metadata.ListResult](t)(s.List(ctxT(t), prefix, metadata.Page{}, metadata.ReadOptions{}))
	var out []string
	for _, kv := range res.KVs {
		out = append(out, kv.Key+"="+string(kv.Value))
	}
	return out
}

func sameList(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("%s: keys %v, want %v", what, got, want)
	}
}

// limitStores runs test on the in-process store and on the gRPC client of
// a one-node cluster configured by configure.
func limitStores(t *testing.T, configure func(cfg *metadata.NodeConfig), test func(t *testing.T, s metadata.Store)) {
	opts := metadatatest.Options{Configure: func(_ int, cfg *metadata.NodeConfig) { configure(cfg) }}
	t.Run("local", func(t *testing.T) {
		c := metadatatest.StartClusterWith(t, 1, opts)
		test(t, c.Store(0, metadata.GlobalShard))
	})
	t.Run("grpc", func(t *testing.T) {
		opts.GRPC = true
		c := metadatatest.StartClusterWith(t, 1, opts)
		test(t, newClient(t, c.Endpoints(), metadata.GlobalShard))
	})
}

// TestLimitMaxKeys: a put of a new key past max_keys is refused, naming the
// field and its value, and changes nothing; replacing a key, a transaction
// that adds one key and deletes another, and deletes pass; after a delete
// the put passes.
func TestLimitMaxKeys(t *testing.T) {
	limitStores(t, func(cfg *metadata.NodeConfig) { cfg.MaxKeys = 3 }, func(t *testing.T, s metadata.Store) {
		ctx := ctxT(t)
		for _, k := range []string{"k/a", "k/b", "k/c"} {
			must[metadata.KV](t)(s.Put(ctx, k, []byte("1"), metadata.AnyVersion, 0))
		}
		full := []string{"k/a=1", "k/b=1", "k/c=1"}
		_, err := s.Put(ctx, "k/d", []byte("1"), metadata.AnyVersion, 0)
		wantLimit(t, "4th key", err, "max_keys 3", "holds 3 keys")
		_, err = s.Txn(ctx, []metadata.Op{{Type: metadata.OpPut, Key: "k/a", Value: []byte("2")}, {Type: metadata.OpPut, Key: "k/e", Value: []byte("1")}})
		wantLimit(t, "txn replacing one key and adding one", err, "max_keys 3")
		sameList(t, "after refusals", listAll(t, s, "k/"), full)
		if kv := must[metadata.KV](t)(s.Get(ctx, "k/a", metadata.ReadOptions{})); kv.Version != 1 {
			t.Fatalf("refused txn changed k/a: %+v", kv)
		}
		// At the limit: a replace and a swap (one in, one out) pass.
		must[metadata.KV](t)(s.Put(ctx, "k/a", []byte("2"), metadata.AnyVersion, 0))
		must[[]metadata.KV](t)(s.Txn(ctx, []metadata.Op{{Type: metadata.OpDelete, Key: "k/b"}, {Type: metadata.OpPut, Key: "k/d", Value: []byte("1")}}))
		sameList(t, "after replace and swap", listAll(t, s, "k/"), []string{"k/a=2", "k/c=1", "k/d=1"})
		if err := s.Delete(ctx, "k/c", metadata.AnyVersion); err != nil {
			t.Fatal(err)
		}
		must[metadata.KV](t)(s.Put(ctx, "k/e", []byte("1"), metadata.AnyVersion, 0))
		_, err = s.Put(ctx, "k/f", []byte("1"), metadata.AnyVersion, 0)
		wantLimit(t, "4th key again", err, "max_keys 3")
	})
}

// TestLimitMaxKeysStatus: over gRPC the refusal is RESOURCE_EXHAUSTED with
// the stable reason "limit exceeded".
func TestLimitMaxKeysStatus(t *testing.T) {
	c := metadatatest.StartClusterWith(t, 1, metadatatest.Options{GRPC: true, Configure: func(_ int, cfg *metadata.NodeConfig) { cfg.MaxKeys = 1 }})
	cc, err := grpc.NewClient(c.Node(0).GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	mc := metadatav1.NewMetadataClient(cc)
	if _, err := mc.Put(ctxT(t), &metadatav1.PutRequest{Shard: metadata.GlobalShard, Key: "a"}); err != nil {
		t.Fatal(err)
	}
	_, err = mc.Put(ctxT(t), &metadatav1.PutRequest{Shard: metadata.GlobalShard, Key: "b"})
	if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted || !strings.HasPrefix(st.Message(), "limit exceeded: max_keys 1 ") {
		t.Fatalf("2nd key: %v, want ResourceExhausted \"limit exceeded: max_keys 1 ...\"", err)
	}
}

// TestLimitMaxTotalBytes: writes that would grow the keys plus values past
// max_total_bytes are refused and change nothing; a replace counts the
// difference; deletes and the end of a session (deleting its ephemeral
// keys) pass at the limit and make room.
func TestLimitMaxTotalBytes(t *testing.T) {
	limitStores(t, func(cfg *metadata.NodeConfig) { cfg.MaxTotalBytes = 100 }, func(t *testing.T, s metadata.Store) {
		ctx := ctxT(t)
		v := func(n int) []byte { return []byte(strings.Repeat("v", n)) }
		must[metadata.KV](t)(s.Put(ctx, "b1", v(48), metadata.AnyVersion, 0)) // 50 bytes
		sess := must[metadata.SessionID](t)(s.CreateSession(ctx, 10*time.Second))
		must[metadata.KV](t)(s.Put(ctx, "b2", v(48), metadata.AnyVersion, sess)) // 100 bytes
		before := listAll(t, s, "b")
		_, err := s.Put(ctx, "b3", nil, metadata.AnyVersion, 0)
		wantLimit(t, "2-byte key at 100 bytes", err, "max_total_bytes 100", "holds 100 bytes", "adds 2")
		_, err = s.Put(ctx, "b1", v(49), metadata.AnyVersion, 0)
		wantLimit(t, "b1 one byte longer", err, "max_total_bytes 100", "adds 1")
		sameList(t, "after refusals", listAll(t, s, "b"), before)
		// A shorter value frees 8 bytes, which an 8-byte put then takes.
		must[metadata.KV](t)(s.Put(ctx, "b1", v(40), metadata.AnyVersion, 0))
		must[metadata.KV](t)(s.Put(ctx, "b3", v(6), metadata.AnyVersion, 0))
		_, err = s.Put(ctx, "b4", nil, metadata.AnyVersion, 0)
		wantLimit(t, "new key at 100 bytes", err, "max_total_bytes 100")
		// Closing the session deletes b2 at the limit.
		if err := s.CloseSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
		must[metadata.KV](t)(s.Put(ctx, "b4", v(48), metadata.AnyVersion, 0))
		if err := s.Delete(ctx, "b1", metadata.AnyVersion); err != nil {
			t.Fatal(err)
		}
		must[metadata.KV](t)(s.Put(ctx, "b5", v(40), metadata.AnyVersion, 0))
		sameList(t, "end", listAll(t, s, "b"), []string{"b3=" + string(v(6)), "b4=" + string(v(48)), "b5=" + string(v(40))})
	})
}

// TestLimitTotalsSurviveSnapshotRestart: the key and byte totals are
// recomputed from the snapshot a restarted node recovers, so the limits
// refuse exactly as before the restart.
func TestLimitTotalsSurviveSnapshotRestart(t *testing.T) {
	var dir string
	c := metadatatest.StartClusterWith(t, 1, metadatatest.Options{Configure: func(_ int, cfg *metadata.NodeConfig) {
		cfg.SnapshotEntries = 10
		cfg.CompactionOverhead = 2
		cfg.MaxKeys = 50
		cfg.MaxTotalBytes = 1000
		dir = cfg.DataDir
	}})
	ctx := ctxT(t)
	st := c.Store(0, metadata.GlobalShard)
	for i := range 50 {
		k := fmt.Sprintf("t/%02d", i) // 4-byte key, 16-byte value: 1000 bytes in all
		must[metadata.KV](t)(st.Put(ctx, k, []byte(strings.Repeat("x", 16)), metadata.AnyVersion, 0))
	}
	c.StopNode(0)
	if n := countSnapshots(t, dir); n == 0 {
		t.Fatalf("no snapshot under %s", dir)
	}
	c.StartNode(0)
	c.WaitReady()
	st = c.Store(0, metadata.GlobalShard)
	_, err := st.Put(ctx, "t/50", nil, metadata.AnyVersion, 0)
	wantLimit(t, "51st key after restart", err, "max_keys 50", "holds 50 keys")
	_, err = st.Put(ctx, "t/00", []byte(strings.Repeat("x", 17)), metadata.AnyVersion, 0)
	wantLimit(t, "longer value after restart", err, "max_total_bytes 1000", "holds 1000 bytes")
	if got := len(listAll(t, st, "t/")); got != 50 {
		t.Fatalf("%d keys after restart, want 50", got)
	}
	if err := st.Delete(ctx, "t/49", metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	must[metadata.KV](t)(st.Put(ctx, "t/50", []byte(strings.Repeat("x", 16)), metadata.AnyVersion, 0))
}

// dialFrom returns a client of node nd whose connections come from the
// loopback address src (Linux routes all of 127/8 to lo).
func dialFrom(t *testing.T, nd *metadata.Node, src string, opts ...metadata.ClientOption) *metadata.Client {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	opts = append(opts, metadata.WithDialOptions(grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	})))
	cl, err := metadata.NewClient(context.Background(), []string{nd.GRPCAddr()}, metadata.GlobalShard, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// TestLimitMaxSessionsPerClient: without auth a client is its remote IP;
// its session past max_sessions_per_client is refused, naming the field,
// its value and the client, and allocates nothing; another IP and
// in-process callers are not counted; closing or expiry makes room.
func TestLimitMaxSessionsPerClient(t *testing.T) {
	c := metadatatest.StartClusterWith(t, 1, metadatatest.Options{GRPC: true, Configure: func(_ int, cfg *metadata.NodeConfig) {
		cfg.MaxSessionsPerClient = 2
	}})
	ctx := ctxT(t)
	a := dialFrom(t, c.Node(0), "127.0.0.1")
	s1 := must[metadata.SessionID](t)(a.CreateSession(ctx, 10*time.Second))
	s2 := must[metadata.SessionID](t)(a.CreateSession(ctx, time.Second))
	_, err := a.CreateSession(ctx, 10*time.Second)
	wantLimit(t, "3rd session", err, "max_sessions_per_client 2", `client "ip:127.0.0.1"`, "has 2 live sessions")
	// The refusal took no session ID: the next one follows s2.
	b := dialFrom(t, c.Node(0), "127.0.0.2")
	sb := must[metadata.SessionID](t)(b.CreateSession(ctx, 10*time.Second))
	if sb != s2+1 {
		t.Fatalf("session after a refusal is %d, want %d", sb, s2+1)
	}
	must[metadata.SessionID](t)(b.CreateSession(ctx, 10*time.Second))
	_, err = b.CreateSession(ctx, 10*time.Second)
	wantLimit(t, "127.0.0.2's 3rd session", err, `client "ip:127.0.0.2"`)
	must[metadata.SessionID](t)(c.Store(0, metadata.GlobalShard).CreateSession(ctx, 10*time.Second))
	if err := a.CloseSession(ctx, s1); err != nil {
		t.Fatal(err)
	}
	must[metadata.SessionID](t)(a.CreateSession(ctx, 10*time.Second))
	_, err = a.CreateSession(ctx, 10*time.Second)
	wantLimit(t, "3rd session after a close", err, "max_sessions_per_client 2")
	// s2 (1s TTL, no keep-alive) expires and frees its place.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err = a.CreateSession(ctx, 10*time.Second)
		if err == nil {
			break
		}
		wantLimit(t, "session while s2 lives", err, "max_sessions_per_client 2")
		if time.Now().After(deadline) {
			t.Fatalf("s2 never expired: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := a.KeepAlive(ctx, s2); !errors.Is(err, metadata.ErrSessionExpired) {
		t.Fatalf("keep-alive of s2: %v, want expired", err)
	}
}

// TestLimitMaxSessionsPerClientByRole: with auth a client is its
// authenticated role, whatever its IP.
func TestLimitMaxSessionsPerClientByRole(t *testing.T) {
	env := securitytest.NewEnv(t)
	c := metadatatest.StartClusterWith(t, 1, metadatatest.Options{GRPC: true, Configure: func(_ int, cfg *metadata.NodeConfig) {
		cfg.Security = env.Component(security.ComponentRole(security.KindMetadata, "a"))
		cfg.MaxSessionsPerClient = 1
	}})
	ctx := ctxT(t)
	as := func(role, src string) *metadata.Client {
		rt, err := security.ClientRuntime(env.CA.CAOnly(), security.StaticToken(env.Token(role)), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Close() })
		return dialFrom(t, c.Node(0), src, metadata.WithDialOptions(rt.DialOptions("")...))
	}
	a1, a2, b := as("broker.a", "127.0.0.1"), as("broker.a", "127.0.0.2"), as("broker.b", "127.0.0.1")
	must[metadata.SessionID](t)(a1.CreateSession(ctx, 10*time.Second))
	_, err := a2.CreateSession(ctx, 10*time.Second)
	wantLimit(t, "broker.a's 2nd session from another IP", err, "max_sessions_per_client 1", `client "role:broker.a"`)
	must[metadata.SessionID](t)(b.CreateSession(ctx, 10*time.Second))
}

// TestLimitMaxWatchesPerClient: a client's watch past
// max_watches_per_client on one node is refused, naming the field and its
// value; in-process watches are not counted; ending a watch makes room.
func TestLimitMaxWatchesPerClient(t *testing.T) {
	c := metadatatest.StartClusterWith(t, 1, metadatatest.Options{GRPC: true, Configure: func(_ int, cfg *metadata.NodeConfig) {
		cfg.MaxWatchesPerClient = 2
	}})
	ctx := ctxT(t)
	st := c.Store(0, metadata.GlobalShard)
	must[metadata.KV](t)(st.Put(ctx, "w/a", []byte("1"), metadata.AnyVersion, 0))
	cl := newClient(t, c.Endpoints(), metadata.GlobalShard)
	// open starts a watch from revision 0 and waits for its first event,
	// so the server holds it; it returns the watch's cancel.
	open := func() context.CancelFunc {
		wctx, cancel := context.WithCancel(ctx)
		evc, _ := cl.Watch(wctx, "w/", 0)
		collect(t, evc, 1)
		return cancel
	}
	tryOpen := func() error {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		evc, errc := cl.Watch(wctx, "w/", 0)
		select {
		case _, ok := <-evc:
			if ok {
				return nil
			}
			return <-errc
		case <-time.After(10 * time.Second):
			return errors.New("no event and no error")
		case err := <-errc:
			return err
		}
	}
	w1, w2 := open(), open()
	defer w2()
	wantLimit(t, "3rd watch", tryOpen(), "max_watches_per_client 2", `client "ip:127.0.0.1"`, "holds 2 watches")
	// In-process watches are not the client's.
	evc, _ := st.Watch(ctx, "w/", 0)
	collect(t, evc, 1)
	w1()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := tryOpen()
		if err == nil {
			break
		}
		wantLimit(t, "watch while w1 ends", err, "max_watches_per_client 2")
		if time.Now().After(deadline) {
			t.Fatalf("w1's place never freed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNodeConfigQuotas: the quota fields have their defaults, decode from
// YAML and are validated by name.
func TestNodeConfigQuotas(t *testing.T) {
	d := metadata.DefaultNodeConfig()
	if d.MaxTotalBytes != 1<<30 || d.MaxKeys != 1000000 || d.MaxSessionsPerClient != 1024 || d.MaxWatchesPerClient != 256 {
		t.Fatalf("defaults: max_total_bytes %d max_keys %d max_sessions_per_client %d max_watches_per_client %d",
			d.MaxTotalBytes, d.MaxKeys, d.MaxSessionsPerClient, d.MaxWatchesPerClient)
	}
	cfg := loadNodeYAML(t, "max_total_bytes: 2048\nmax_keys: 7\nmax_sessions_per_client: 3\nmax_watches_per_client: 4\n")
	if cfg.MaxTotalBytes != 2048 || cfg.MaxKeys != 7 || cfg.MaxSessionsPerClient != 3 || cfg.MaxWatchesPerClient != 4 {
		t.Fatalf("decoded %d %d %d %d", cfg.MaxTotalBytes, cfg.MaxKeys, cfg.MaxSessionsPerClient, cfg.MaxWatchesPerClient)
	}
	for field, set := range map[string]func(*metadata.NodeConfig){
		"max_total_bytes":         func(c *metadata.NodeConfig) { c.MaxTotalBytes = 0 },
		"max_keys":                func(c *metadata.NodeConfig) { c.MaxKeys = -1 },
		"max_sessions_per_client": func(c *metadata.NodeConfig) { c.MaxSessionsPerClient = 0 },
		"max_watches_per_client":  func(c *metadata.NodeConfig) { c.MaxWatchesPerClient = 0 },
	} {
		c := cfg
		set(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Validate with bad %s: %v, want an error naming it", field, err)
		}
	}
}
