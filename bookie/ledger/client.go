package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
)

// Client creates, writes, reads, recovers and deletes ledgers. It keeps one
// gRPC connection per bookie shared by all its ledgers. Safe for
// concurrent use.
type Client struct {
	cfg  Config
	log  *slog.Logger
	meta metaStore
	m    *metrics

	idMu sync.Mutex
	ids  idAllocator

	// mu guards the fields below.
	mu       sync.Mutex
	conns    map[string]*bookieConn // by bookie ID
	registry map[string]topology.BookieInfo
	// cookies caches instance IDs read from bookie cookies in metadata,
	// for bookies that are not registered (or registered without one).
	cookies map[string]string
	regTime time.Time
	closed  bool
}

// NewClient validates cfg and returns a Client. It does no I/O.
func NewClient(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "ledger", "region", cfg.Region)
	m, err := newMetrics(cfg.Registerer, cfg.Region)
	if err != nil {
		return nil, fmt.Errorf("ledger: register metrics: %w", err)
	}
	return &Client{
		cfg:      cfg,
		log:      log,
		meta:     metaStore{store: cfg.Store},
		m:        m,
		ids:      idAllocator{store: cfg.Store, batch: int64(cfg.IDBatch)},
		conns:    make(map[string]*bookieConn),
		cookies:  make(map[string]string),
		registry: make(map[string]topology.BookieInfo),
	}, nil
}

// Close closes every bookie connection; adds still in flight fail. Writers
// and Readers of this client must not be used afterwards.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	conns := c.conns
	c.conns = map[string]*bookieConn{}
	c.mu.Unlock()
	for _, bc := range conns {
		bc.close()
	}
	return nil
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Bookies lists the registered bookies (read-only ones included), sorted
// by ID (topology.ListBookies; registrations without an address are
// skipped), and remembers their addresses for reconnecting.
func (c *Client) Bookies(ctx context.Context) ([]topology.BookieInfo, error) {
	all, _, err := topology.ListBookies(ctx, c.cfg.Store, c.log)
	if err != nil {
		return nil, fmt.Errorf("ledger: list bookies: %w", err)
	}
	out := all[:0]
	for _, b := range all {
		if b.Address == "" {
			c.log.Warn("ignoring bookie registration without an address", "bookie", b.ID)
			continue
		}
		out = append(out, b)
	}
	c.mu.Lock()
	c.registry = make(map[string]topology.BookieInfo, len(out))
	clear(c.cookies) // re-read: a bookie may have been re-formatted
	for _, b := range out {
		c.registry[b.ID] = b
	}
	c.regTime = time.Now()
	c.mu.Unlock()
	return out, nil
}

// writableBookies lists registered bookies that accept adds.
func (c *Client) writableBookies(ctx context.Context) ([]topology.BookieInfo, error) {
	all, err := c.Bookies(ctx)
	if err != nil {
		return nil, err
	}
	return topology.Writable(all), nil
}

// conn returns the shared connection to bookie b. A bookie that registered
// again at another address (restart) is reached at its new address.
//
// Requests on the connection name the bookie's instance: the registry's
// (the bookie's current cookie), else the one recorded with b, else the
// bookie's metadata cookie (bookie.CookieKey). A connection to an older
// instance is replaced.
func (c *Client) conn(b topology.BookieInfo) (*bookieConn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrLedgerClosed
	}
	addr := b.Address
	inst := b.InstanceID
	if r, ok := c.registry[b.ID]; ok && r.Address != "" {
		addr = r.Address
		if r.InstanceID != "" {
			inst = r.InstanceID
		}
	}
	if inst == "" {
		inst = c.cookies[b.ID]
	}
	if inst == "" {
		c.mu.Unlock()
		inst = c.cookieInstance(b.ID)
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrLedgerClosed
		}
	}
	bc := c.conns[b.ID]
	if bc != nil && bc.addr == addr && bc.instance == inst {
		c.mu.Unlock()
		return bc, nil
	}
	var old *bookieConn
	if bc != nil {
		old = bc
		delete(c.conns, b.ID)
	}
	nc, err := newBookieConn(b.ID, addr, inst, &c.cfg, c.log)
	if err == nil {
		c.conns[b.ID] = nc
	}
	c.mu.Unlock()
	if old != nil {
		go old.close()
	}
	return nc, err
}

// cookieInstance reads bookie id's instance from its metadata cookie ("" if
// it cannot: requests then name no instance and the bookie refuses them).
func (c *Client) cookieInstance(id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ReadTimeout)
	defer cancel()
	kv, err := c.cfg.Store.Get(ctx, bookie.CookieKey(id), metadata.ReadOptions{})
	if err != nil {
		c.log.Debug("bookie cookie lookup failed", "bookie", id, "err", err)
		return ""
	}
	var ck bookie.Cookie
	if err := json.Unmarshal(kv.Value, &ck); err != nil || ck.InstanceID == "" {
		c.log.Warn("bookie cookie in metadata is damaged", "bookie", id, "err", err)
		return ""
	}
	c.mu.Lock()
	c.cookies[id] = ck.InstanceID
	c.mu.Unlock()
	return ck.InstanceID
}

// refreshRegistry re-lists bookies at most once a second, so reads and
// recovery find bookies that restarted at another address.
func (c *Client) refreshRegistry(ctx context.Context) {
	c.mu.Lock()
	fresh := time.Since(c.regTime) < time.Second
	c.mu.Unlock()
	if !fresh {
		if _, err := c.Bookies(ctx); err != nil {
			c.log.Debug("bookie registry refresh failed", "err", err)
		}
	}
}

// Create allocates a ledger ID, chooses an ensemble with the placement
// policy, records the metadata and returns the ledger's Writer.
func (c *Client) Create(ctx context.Context, opts CreateOptions) (*Writer, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, fmt.Errorf("%w: client closed", ErrLedgerClosed)
	}
	bookies, err := c.writableBookies(ctx)
	if err != nil {
		return nil, err
	}
	ens, err := c.cfg.Placement.NewEnsemble(opts.Ensemble, opts.WriteQuorum, opts.AckQuorum, bookies, nil)
	if err != nil {
		return nil, wrapPlacement(err)
	}
	id, err := c.allocateID(ctx, ens)
	if err != nil {
		return nil, err
	}
	md := &Metadata{
		ID:            id,
		State:         StateOpen,
		Ensemble:      opts.Ensemble,
		WriteQuorum:   opts.WriteQuorum,
		AckQuorum:     opts.AckQuorum,
		Segments:      []Segment{{FirstEntry: 0, Ensemble: ens}},
		LastEntry:     -1,
		Length:        0,
		CreatedUnixMs: time.Now().UnixMilli(),
		Properties:    opts.Properties,
		version:       metadata.MustNotExist,
	}
	if err := c.meta.cas(ctx, md); err != nil {
		return nil, fmt.Errorf("ledger: create metadata of %d: %w", id, err)
	}
	c.log.Debug("ledger created", "ledger", id, "ensemble", bookieIDs(ens))
	return newWriter(c, md), nil
}

// allocateID returns a fresh ledger ID for a new ledger on ens. An ID
// from a range this client reserved before a bookie of ens was
// re-formatted can be below that bookie's limbo limit (the counter when it
// was formatted, bookie/limbo.go): the bookie would refuse normal adds to
// the ledger although it never lived on the previous instance, and
// without a spare bookie to replace it every new ledger would fail at its
// first add. The rest of such a range is skipped: a new reservation starts
// at or above the limit. (A format after the limits were read is missed:
// the writer then replaces the bookie, as before.)
func (c *Client) allocateID(ctx context.Context, ens []topology.BookieInfo) (int64, error) {
	limit := c.limboLimit(ctx, ens)
	c.idMu.Lock()
	defer c.idMu.Unlock()
	id, err := c.ids.allocate(ctx)
	if err != nil || id >= limit {
		return id, err
	}
	skipped := c.ids.end - id
	c.ids.next = c.ids.end
	if id, err = c.ids.allocate(ctx); err != nil {
		return 0, err
	}
	c.log.Info("ledger IDs reserved before a bookie's re-format skipped (they are in its limbo)",
		"skipped", skipped, "limbo_below_ledger", limit, "ledger", id)
	return id, nil
}

// limboLimit is the highest limbo limit (Cookie.LimboBelowLedger in the
// metadata cookie) of the bookies of ens, 0 when none is in limbo or a
// cookie cannot be read.
func (c *Client) limboLimit(ctx context.Context, ens []topology.BookieInfo) int64 {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadTimeout)
	defer cancel()
	var limit int64
	for _, b := range ens {
		kv, err := c.cfg.Store.Get(ctx, bookie.CookieKey(b.ID), metadata.ReadOptions{})
		if err != nil {
			c.log.Debug("bookie cookie lookup failed", "bookie", b.ID, "err", err)
			continue
		}
		var ck bookie.Cookie
		if err := json.Unmarshal(kv.Value, &ck); err != nil {
			continue
		}
		limit = max(limit, ck.LimboBelowLedger)
	}
	return limit
}

func wrapPlacement(err error) error {
	if errors.Is(err, topology.ErrNotEnoughBookies) {
		return fmt.Errorf("%w: %v", ErrNotEnoughBookies, err)
	}
	return fmt.Errorf("ledger: placement: %w", err)
}

func bookieIDs(ens []topology.BookieInfo) []string {
	ids := make([]string, len(ens))
	for i, b := range ens {
		ids[i] = b.ID
	}
	return ids
}

// Metadata returns the ledger's current metadata.
func (c *Client) Metadata(ctx context.Context, id int64) (*Metadata, error) {
	m, err := c.meta.get(ctx, id)
	if err != nil {
		return nil, err
	}
	return m.clone(), nil
}

// Open opens ledger id for reading without fencing it. The Reader can read
// up to the last-add-confirmed it learned (or the last entry if closed).
func (c *Client) Open(ctx context.Context, id int64) (*Reader, error) {
	md, err := c.meta.get(ctx, id)
	if err != nil {
		return nil, err
	}
	r := newReader(c, md)
	if md.State != StateClosed {
		if _, err := r.ReadLastAddConfirmed(ctx); err != nil {
			c.log.Debug("reading last-add-confirmed at open failed", "ledger", id, "err", err)
		}
	}
	return r, nil
}

// Delete deletes the ledger's entries on its bookies (best effort: a bookie
// that cannot be reached keeps its copy until it garbage-collects ledgers
// without metadata) and then its metadata, guarded by the version it read:
// if the metadata changed meanwhile (an autorecovery swap put a replica on
// another bookie), it re-reads and deletes on the bookies of the new
// version too, so no replica is left without metadata. ErrNoSuchLedger if
// absent.
func (c *Client) Delete(ctx context.Context, id int64) error {
	done := map[string]bool{} // bookies already asked to delete
	for attempt := 0; ; attempt++ {
		md, err := c.meta.get(ctx, id)
		if err != nil {
			if attempt > 0 && errors.Is(err, ErrNoSuchLedger) {
				return nil // deleted concurrently
			}
			return err
		}
		todo := map[string]topology.BookieInfo{}
		for _, s := range md.Segments {
			for _, b := range s.Ensemble {
				if !done[b.ID] {
					todo[b.ID] = b
				}
			}
		}
		c.deleteOnBookies(ctx, id, todo)
		for bid := range todo {
			done[bid] = true
		}
		err = c.cfg.Store.Delete(ctx, LedgerKey(id), md.version)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, metadata.ErrNotFound):
			return nil // deleted concurrently
		case errors.Is(err, metadata.ErrVersionMismatch):
			if attempt >= maxDeleteAttempts {
				return fmt.Errorf("ledger: delete metadata of %d: changed concurrently %d times: %w", id, attempt+1, err)
			}
			continue // changed meanwhile: delete on its new bookies too
		default:
			return fmt.Errorf("ledger: delete metadata of %d: %w", id, err)
		}
	}
}

// maxDeleteAttempts bounds Delete's re-reads after concurrent changes.
const maxDeleteAttempts = 20

// deleteOnBookies asks each bookie to delete the ledger, in parallel.
func (c *Client) deleteOnBookies(ctx context.Context, id int64, bookies map[string]topology.BookieInfo) {
	var wg sync.WaitGroup
	for _, b := range bookies {
		wg.Add(1)
		go func(b topology.BookieInfo) {
			defer wg.Done()
			bc, err := c.conn(b)
			if err == nil {
				rctx, cancel := context.WithTimeout(ctx, c.cfg.ReadTimeout)
				_, err = bc.client.DeleteLedger(rctx, &bookiev1.DeleteLedgerRequest{LedgerId: id})
				cancel()
			}
			if err != nil {
				c.log.Warn("delete on bookie failed; left to its garbage collection", "ledger", id, "bookie", b.ID, "err", err)
			}
		}(b)
	}
	wg.Wait()
}

// Ledgers lists the IDs of every ledger with metadata, in ID order (for
// garbage collection and autorecovery scans).
func (c *Client) Ledgers(ctx context.Context) ([]int64, error) {
	var out []int64
	page := metadata.Page{}
	for {
		res, err := c.cfg.Store.List(ctx, LedgerKeyPrefix, page, metadata.ReadOptions{})
		if err != nil {
			return nil, fmt.Errorf("ledger: list ledgers: %w", err)
		}
		for _, kv := range res.KVs {
			if id, ok := ParseLedgerKey(kv.Key); ok {
				out = append(out, id)
			}
		}
		if !res.More || len(res.KVs) == 0 {
			return out, nil
		}
		page.After = res.KVs[len(res.KVs)-1].Key
	}
}
