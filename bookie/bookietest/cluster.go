// Package bookietest starts real bookie servers in-process for tests of the
// bookie, the ledger client and everything above them: each bookie has its
// own directories under t.TempDir(), listens on 127.0.0.1 with a random
// port, writes through a *faultfs.FaultFS (so tests can inject disk faults)
// and, if a metadata store is given, registers in it. Bookies can be
// stopped, killed and restarted on the same directories and address.
package bookietest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/internal/faultfs"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
)

type options struct {
	racks    []string
	region   string
	store    metadata.Store
	tweak    func(i int, cfg *bookie.Config)
	logLevel slog.Level
	gossip   bool
	seeds    []string
}

// Option configures StartCluster.
type Option func(*options)

// WithRacks puts bookie i in racks[i%len(racks)] (default: every bookie in
// its own rack "rack-<i>").
func WithRacks(racks ...string) Option { return func(o *options) { o.racks = racks } }

// WithRegion sets every bookie's region (default "local").
func WithRegion(region string) Option { return func(o *options) { o.region = region } }

// WithMetadata registers every bookie in store (ephemeral registry keys).
func WithMetadata(store metadata.Store) Option { return func(o *options) { o.store = store } }

// WithConfig lets the test change bookie i's config before it starts (and
// before each restart).
func WithConfig(f func(i int, cfg *bookie.Config)) Option { return func(o *options) { o.tweak = f } }

// WithGossip makes every bookie join a memberlist cluster on loopback with
// fast failure detection (a killed bookie is declared dead in about a
// second). Bookies seed from each other and from extra seeds.
func WithGossip(seeds ...string) Option {
	return func(o *options) { o.gossip, o.seeds = true, seeds }
}

// WithLogLevel sets the level of bookie logs routed to t.Log (default Warn).
func WithLogLevel(l slog.Level) Option { return func(o *options) { o.logLevel = l } }

// Cluster is a set of in-process bookies.
type Cluster struct {
	t    testing.TB
	opts options

	mu      sync.Mutex // guards the fields below
	bookies []*node
	closed  bool
}

type node struct {
	cfg      bookie.Config
	fs       *faultfs.FaultFS
	srv      *bookie.Server // nil while stopped
	addr     string
	gossip   string // gossip address, kept across restarts (memberlist rejects a name at a new address)
	conn     *grpc.ClientConn
	running  bool
	instance string // instance ID of the last start
}

// StartCluster starts n bookies and stops them in t.Cleanup. Bookie i has
// ID "bookie-<i>".
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	c := &Cluster{t: t, opts: options{region: "local", logLevel: slog.LevelWarn}}
	for _, o := range opts {
		o(&c.opts)
	}
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	// Registered after the TempDirs so it runs before they are removed.
	t.Cleanup(c.Close)
	for i := range n {
		dir := dirs[i]
		cfg := bookie.DefaultConfig()
		cfg.ID = fmt.Sprintf("bookie-%d", i)
		cfg.Region = c.opts.region
		if len(c.opts.racks) > 0 {
			cfg.Rack = c.opts.racks[i%len(c.opts.racks)]
		} else {
			cfg.Rack = fmt.Sprintf("rack-%d", i)
		}
		cfg.JournalDir = filepath.Join(dir, "journal")
		cfg.LedgerDir = filepath.Join(dir, "ledgers")
		cfg.HTTPAddr = "127.0.0.1:0"
		cfg.Metadata = c.opts.store
		if c.opts.store != nil {
			cfg.SessionTTL = 3 * time.Second
		}
		nd := &node{cfg: cfg, fs: faultfs.New(nil)}
		c.bookies = append(c.bookies, nd)
		if err := c.startNode(i); err != nil {
			t.Fatalf("bookietest: start bookie %d: %v", i, err)
		}
	}
	return c
}

func (c *Cluster) logger(i int) *slog.Logger {
	return slog.New(slog.NewTextHandler(&tlogWriter{c: c}, &slog.HandlerOptions{Level: c.opts.logLevel})).With("idx", i)
}

type tlogWriter struct{ c *Cluster }

func (w *tlogWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	closed := w.c.closed
	w.c.mu.Unlock()
	if !closed {
		w.c.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

var _ io.Writer = (*tlogWriter)(nil)

// startNode starts bookie i; call without c.mu held.
func (c *Cluster) startNode(i int) error {
	c.mu.Lock()
	nd := c.bookies[i]
	cfg := nd.cfg
	if nd.addr != "" {
		cfg.ListenAddr = nd.addr // restart on the same address
	}
	c.mu.Unlock()
	cfg.Logger = c.logger(i)
	cfg.Testing.FS = nd.fs
	if c.opts.gossip {
		gc := topology.DefaultMembershipConfig().WithFastFailureDetection()
		gc.Seeds = append(append([]string(nil), c.opts.seeds...), c.gossipSeeds(i)...)
		c.mu.Lock()
		if nd.gossip != "" {
			gc.BindAddr = nd.gossip
		}
		c.mu.Unlock()
		cfg.Gossip = &gc
	}
	if c.opts.tweak != nil {
		c.opts.tweak(i, &cfg)
	}
	srv, err := bookie.NewServer(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var startErr error
	// The old port can be briefly unavailable after a stop; retry.
	for attempt := 0; attempt < 50; attempt++ {
		if startErr = srv.Start(ctx); startErr == nil || errors.Is(startErr, bookie.ErrCookie) {
			break
		}
		srv, err = bookie.NewServer(cfg)
		if err != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	if startErr != nil {
		return startErr
	}
	c.mu.Lock()
	nd.srv = srv
	nd.addr = srv.Addr()
	nd.instance = srv.InstanceID()
	if m := srv.Membership(); m != nil {
		nd.gossip = m.Addr()
	}
	nd.running = true
	conn := nd.conn
	c.mu.Unlock()
	if c.opts.store != nil {
		deadline := time.Now().Add(20 * time.Second)
		for !srv.Registered() {
			if time.Now().After(deadline) {
				return fmt.Errorf("bookietest: bookie %d did not register in the metadata store", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if conn != nil {
		// Make the shared connection drop its transport to the previous
		// incarnation before the test uses it again.
		cl := bookiev1.NewBookieClient(conn) // GetInfo needs no identity
		deadline := time.Now().Add(20 * time.Second)
		for {
			pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := cl.GetInfo(pctx, &bookiev1.GetInfoRequest{}, grpc.WaitForReady(true))
			pcancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("bookietest: bookie %d not reachable after restart: %w", i, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// gossipSeeds returns the gossip addresses of the running bookies other than i.
func (c *Cluster) gossipSeeds(i int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for j, nd := range c.bookies {
		if j != i && nd.srv != nil && nd.srv.Membership() != nil {
			out = append(out, nd.srv.Membership().Addr())
		}
	}
	return out
}

// GossipAddrs returns the gossip addresses of the running bookies (for
// other nodes to seed from); empty without WithGossip.
func (c *Cluster) GossipAddrs() []string { return c.gossipSeeds(-1) }

// N returns the number of bookies.
func (c *Cluster) N() int { return len(c.bookies) }

// Server returns bookie i's server (nil while stopped).
func (c *Cluster) Server(i int) *bookie.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bookies[i].srv
}

// ID returns bookie i's ID.
func (c *Cluster) ID(i int) string { return c.bookies[i].cfg.ID }

// Addr returns bookie i's gRPC address (kept across restarts).
func (c *Cluster) Addr(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bookies[i].addr
}

// Addrs returns every bookie's gRPC address, in index order.
func (c *Cluster) Addrs() []string {
	out := make([]string, c.N())
	for i := range out {
		out[i] = c.Addr(i)
	}
	return out
}

// Info returns bookie i as placement sees it (ReadOnly is the live state
// when running).
func (c *Cluster) Info(i int) topology.BookieInfo {
	c.mu.Lock()
	nd := c.bookies[i]
	srv := nd.srv
	info := topology.BookieInfo{ID: nd.cfg.ID, Address: nd.addr, Region: nd.cfg.Region, Rack: nd.cfg.Rack, InstanceID: nd.instance}
	c.mu.Unlock()
	if srv != nil {
		info.ReadOnly, _ = srv.ReadOnly()
	}
	return info
}

// Infos returns Info(i) for every running bookie.
func (c *Cluster) Infos() []topology.BookieInfo {
	var out []topology.BookieInfo
	for i := range c.N() {
		if c.Running(i) {
			out = append(out, c.Info(i))
		}
	}
	return out
}

// FaultFS returns bookie i's fault-injecting file system (kept across
// restarts; faults stay armed until cleared).
func (c *Cluster) FaultFS(i int) *faultfs.FaultFS {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bookies[i].fs
}

// Dirs returns bookie i's journal and ledger directories.
func (c *Cluster) Dirs(i int) (journal, ledgers string) {
	return c.bookies[i].cfg.JournalDir, c.bookies[i].cfg.LedgerDir
}

// Running reports whether bookie i is running.
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bookies[i].running
}

// Client returns a gRPC client for bookie i over a connection owned by the
// cluster (it reconnects across restarts).
func (c *Cluster) Client(i int) bookiev1.BookieClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	nd := c.bookies[i]
	if nd.conn == nil {
		// Requests name the bookie's current instance (re-read at every
		// send, so the client follows a re-format).
		identity := func() (string, string) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if nd.srv == nil {
				return nd.cfg.ID, nd.instance
			}
			return nd.cfg.ID, nd.srv.InstanceID()
		}
		opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
			experimental.WithBufferPool(bookie.BufferPool())}, bookie.WithExpectedIdentity(identity)...)
		conn, err := grpc.NewClient(nd.addr, opts...)
		if err != nil {
			c.t.Fatalf("bookietest: dial %s: %v", nd.addr, err)
		}
		nd.conn = conn
	}
	return bookiev1.NewBookieClient(nd.conn)
}

// Stop stops bookie i gracefully (final checkpoint, registry key removed).
func (c *Cluster) Stop(i int) { c.halt(i, true) }

// Kill stops bookie i abruptly (no final checkpoint, queued adds fail, the
// registry session is left to expire).
func (c *Cluster) Kill(i int) { c.halt(i, false) }

func (c *Cluster) halt(i int, graceful bool) {
	c.mu.Lock()
	nd := c.bookies[i]
	srv := nd.srv
	nd.srv = nil
	nd.running = false
	c.mu.Unlock()
	if srv == nil {
		return
	}
	if graceful {
		srv.Stop()
	} else {
		srv.Kill()
	}
}

// PowerLoss cuts the power of bookie i: every journal and index file loses
// the bytes not yet fsynced (faultfs.FaultFS.PowerLoss), then the bookie
// is killed. Its next Restart runs on a fresh fault layer over what is
// left on disk. It returns the faultfs answer lines.
func (c *Cluster) PowerLoss(i int) []string {
	c.mu.Lock()
	nd := c.bookies[i]
	fs := nd.fs
	c.mu.Unlock()
	lines, err := fs.PowerLoss()
	if err != nil {
		c.t.Fatalf("bookietest: power loss of bookie %d: %v", i, err)
	}
	c.Kill(i)
	c.mu.Lock()
	nd.fs = faultfs.New(nil)
	c.mu.Unlock()
	return lines
}

// Restart starts a stopped or killed bookie i again on the same
// directories, ID and address (stopping it first if it is running).
func (c *Cluster) Restart(i int) error {
	if c.Running(i) {
		c.Stop(i)
	}
	return c.startNode(i)
}

// Wipe kills bookie i (if running) and deletes everything in its journal
// and ledger directories, cookies included: a lost disk. Restart then
// refuses to start (bookie.ErrCookie) until Format is run.
func (c *Cluster) Wipe(i int) {
	c.Kill(i)
	j, l := c.Dirs(i)
	for _, d := range []string{j, l} {
		if err := os.RemoveAll(d); err != nil {
			c.t.Fatalf("bookietest: wipe %s: %v", d, err)
		}
	}
}

// Format re-formats the stopped bookie i (bookie.Format with Force): new
// instance ID, limbo for the ledgers its previous instance may have held.
func (c *Cluster) Format(i int) (bookie.Cookie, error) {
	if c.Running(i) {
		c.Stop(i)
	}
	c.mu.Lock()
	cfg := c.bookies[i].cfg
	cfg.Testing.FS = c.bookies[i].fs
	c.mu.Unlock()
	cfg.Logger = c.logger(i)
	if c.opts.tweak != nil {
		c.opts.tweak(i, &cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return bookie.Format(ctx, cfg, bookie.FormatOptions{Force: true})
}

// Close stops every bookie and closes the client connections (also run by
// t.Cleanup).
func (c *Cluster) Close() {
	for i := range c.bookies {
		c.Stop(i)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, nd := range c.bookies {
		if nd.conn != nil {
			nd.conn.Close()
			nd.conn = nil
		}
	}
	c.closed = true
}
