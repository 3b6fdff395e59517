package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"
	"github.com/prometheus/client_golang/prometheus"
)

// WANConfig configures the broker's WAN membership pool (yaml `wan`): a
// memberlist pool of the brokers of every region, used for region health
// (`meridian admin regions list`: reachable, last seen). Gossip goes over
// TCP only (topology.TCPTransport) and every address it dials is rewritten
// through the broker's dial_rewrite, like the rest of its cross-region
// traffic.
type WANConfig struct {
	// BindAddress is the gossip listen address, host:port ("" = no WAN
	// pool; port 0 picks a free port).
	BindAddress string `yaml:"bind_address"`
	// AdvertiseAddress is the address other brokers dial (default: the
	// bound address). It is what the region registry records.
	AdvertiseAddress string `yaml:"advertise_address"`
	// Seeds are WAN addresses of brokers to join. The pool also joins the
	// WAN addresses found in the global region registry (`regions/<name>`),
	// so seeds are only needed when the global shard is out of reach.
	Seeds []string `yaml:"seeds"`
	// FastFailureDetection uses loopback timings (a dead region is seen in
	// about a second) instead of memberlist's WAN preset (tens of seconds):
	// for `meridian dev` and tests.
	FastFailureDetection bool `yaml:"fast_failure_detection"`
	// DiscoverInterval is how often the region registry is read for new
	// seeds (default 10s).
	DiscoverInterval time.Duration `yaml:"discover_interval"`
	// GossipKeyFile, when set, encrypts the WAN pool: one base64 key per
	// line, the first the primary, reloaded when the file changes (key
	// rotation; see topology.MembershipConfig.KeyFile). Every broker of
	// every region needs the same keys.
	GossipKeyFile string `yaml:"gossip_key_file"`
}

// enabled reports whether the WAN pool is configured.
func (c WANConfig) enabled() bool { return c.BindAddress != "" }

// validate checks the WAN config; the error names the field.
func (c WANConfig) validate() error {
	if !c.enabled() {
		return nil
	}
	if _, _, err := net.SplitHostPort(c.BindAddress); err != nil {
		return fmt.Errorf("wan.bind_address %q must be host:port", c.BindAddress)
	}
	if c.AdvertiseAddress != "" {
		if _, _, err := net.SplitHostPort(c.AdvertiseAddress); err != nil {
			return fmt.Errorf("wan.advertise_address %q must be host:port", c.AdvertiseAddress)
		}
	}
	for i, s := range c.Seeds {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("wan.seeds[%d] %q must be host:port", i, s)
		}
	}
	if c.DiscoverInterval < 0 {
		return fmt.Errorf("wan.discover_interval %v must be >= 0 (0: default 10s)", c.DiscoverInterval)
	}
	return nil
}

// RegionHealthSource answers whether a region is reachable, as the WAN pool
// sees it. *WANPool implements it.
type RegionHealthSource interface {
	// Region reports whether any member of the region is alive now
	// (reachable), the last time one was seen alive (now when reachable;
	// zero if never), and ok false when the pool never saw the region.
	Region(name string) (reachable bool, lastSeen time.Time, ok bool)
}

// WANPoolConfig configures a WANPool.
type WANPoolConfig struct {
	// Name is this member's unique name in the pool (required).
	Name string
	// Region is this member's region (required), gossiped in its metadata.
	Region string
	// WAN is the pool's addresses and timings; BindAddress is required.
	WAN WANConfig
	// DialRewrite maps addresses to dial instead (a link proxy).
	DialRewrite map[string]string
	// Meta is extra metadata gossiped with the member (for example its
	// gRPC address); region is carried separately.
	Meta map[string]string
	// Discover, when set, returns more seed addresses; the pool calls it
	// every WAN.DiscoverInterval and joins what it returns.
	Discover func(ctx context.Context) ([]string, error)
	// Logger receives the pool's logs (nil discards).
	Logger *slog.Logger
	// Registerer receives the pool's metrics (nil: none).
	Registerer prometheus.Registerer
}

// WANPool is a broker's membership in the WAN pool: which regions are
// reachable and when each was last seen. Safe for concurrent use.
type WANPool struct {
	cfg  WANPoolConfig
	log  *slog.Logger
	m    *topology.Membership
	stop chan struct{}
	wg   sync.WaitGroup
	coll *wanCollector

	// mu guards the fields below.
	mu sync.Mutex
	// lastSeen is, per region, when its last alive member was declared
	// dead or left: the last time the region was seen alive.
	lastSeen map[string]time.Time
	// known holds every region the pool has seen a member of.
	known  map[string]bool
	closed bool
}

var _ RegionHealthSource = (*WANPool)(nil)

// StartWANPool starts gossip on cfg.WAN.BindAddress and joins the seeds
// (unreachable seeds are retried in the background).
func StartWANPool(cfg WANPoolConfig) (*WANPool, error) {
	if cfg.Name == "" || cfg.Region == "" {
		return nil, fmt.Errorf("%w: wan pool: name and region are required", ErrInvalidArgument)
	}
	if !cfg.WAN.enabled() {
		return nil, fmt.Errorf("%w: wan.bind_address is empty", ErrInvalidArgument)
	}
	if err := cfg.WAN.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if cfg.WAN.DiscoverInterval == 0 {
		cfg.WAN.DiscoverInterval = 10 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mc := topology.DefaultMembershipConfig()
	if cfg.WAN.FastFailureDetection {
		mc = mc.WithFastFailureDetection()
	}
	mc.NodeName = cfg.Name
	mc.Region = cfg.Region
	mc.Role = topology.RoleBroker
	mc.Profile = topology.ProfileWAN
	mc.BindAddr = cfg.WAN.BindAddress
	mc.AdvertiseAddr = cfg.WAN.AdvertiseAddress
	mc.Seeds = slices.Clone(cfg.WAN.Seeds)
	mc.DialRewrite = cfg.DialRewrite
	mc.KeyFile = cfg.WAN.GossipKeyFile
	mc.TCPOnly = true // every broker of the pool must agree on the transport
	mc.Meta = cfg.Meta
	mc.Logger = log
	mc.Registerer = cfg.Registerer
	p := &WANPool{cfg: cfg, log: log.With("component", "wan"), stop: make(chan struct{}),
		lastSeen: map[string]time.Time{}, known: map[string]bool{}}
	m, err := topology.NewMembership(mc)
	if err != nil {
		return nil, fmt.Errorf("broker: wan pool: %w", err)
	}
	p.m = m
	// Members that joined before the subscription are picked up here.
	events, cancel := m.Subscribe(0)
	p.noteMembers()
	p.wg.Add(1)
	go p.watch(events, cancel)
	if cfg.Discover != nil {
		p.wg.Add(1)
		go p.discoverLoop()
	}
	if cfg.Registerer != nil {
		p.coll = &wanCollector{p: p, desc: prometheus.NewDesc("meridian_broker_wan_region_reachable",
			"1 when a member of the region is alive in this broker's WAN pool, else 0, by region.", []string{"region"}, nil)}
		if err := cfg.Registerer.Register(p.coll); err != nil {
			p.log.Warn("wan pool metrics not registered", "err", err)
			p.coll = nil
		}
	}
	return p, nil
}

// Addr is this member's WAN gossip address (advertised).
func (p *WANPool) Addr() string { return p.m.Addr() }

// Members returns the pool's live members, this broker included.
func (p *WANPool) Members() []topology.Member { return p.m.Members() }

// AddSeeds joins more WAN addresses (and keeps retrying them).
func (p *WANPool) AddSeeds(addrs ...string) {
	var out []string
	for _, a := range addrs {
		if a != "" && a != p.Addr() {
			out = append(out, a)
		}
	}
	p.m.AddSeeds(out...)
}

// Region implements RegionHealthSource.
func (p *WANPool) Region(name string) (reachable bool, lastSeen time.Time, ok bool) {
	for _, mem := range p.m.Members() {
		if mem.Region == name && mem.State == topology.StateAlive {
			return true, time.Now(), true
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return false, p.lastSeen[name], p.known[name]
}

// Regions lists the regions the pool has seen, sorted.
func (p *WANPool) Regions() []string {
	p.noteMembers()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.known))
	for r := range p.known {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// noteMembers records the regions of the live members as known.
func (p *WANPool) noteMembers() {
	ms := p.m.Members()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, mem := range ms {
		if mem.Region != "" {
			p.known[mem.Region] = true
		}
	}
}

// watch turns membership events into region knowledge and last-seen times.
func (p *WANPool) watch(events <-chan topology.MemberEvent, cancel func()) {
	defer p.wg.Done()
	defer cancel()
	for {
		select {
		case <-p.stop:
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			switch ev.Type {
			case topology.EventJoin, topology.EventUpdate:
				p.mu.Lock()
				if ev.Member.Region != "" {
					p.known[ev.Member.Region] = true
				}
				p.mu.Unlock()
			case topology.EventLeave:
				// The member was alive until now, as far as gossip knows.
				p.mu.Lock()
				p.known[ev.Member.Region] = true
				p.lastSeen[ev.Member.Region] = time.Now()
				p.mu.Unlock()
				p.log.Info("wan member gone", "member", ev.Member.Name, "region", ev.Member.Region, "state", ev.Member.State)
			case topology.EventResync:
				p.noteMembers()
			}
		}
	}
}

func (p *WANPool) discoverLoop() {
	defer p.wg.Done()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), max(p.cfg.WAN.DiscoverInterval, 5*time.Second))
		addrs, err := p.cfg.Discover(ctx)
		cancel()
		if err != nil {
			p.log.Debug("wan seeds not discovered from the region registry", "err", err)
		}
		p.AddSeeds(addrs...)
		select {
		case <-p.stop:
			return
		case <-time.After(p.cfg.WAN.DiscoverInterval):
		}
	}
}

// Leave announces a graceful departure (others see it left, not dead) and
// stops the pool.
func (p *WANPool) Leave(ctx context.Context) error {
	if !p.markClosed() {
		return nil
	}
	err := p.m.Leave(ctx)
	p.finish()
	return err
}

// Close stops the pool without a leave message: to the others this broker
// looks crashed. Safe to call more than once.
func (p *WANPool) Close() error {
	if !p.markClosed() {
		return nil
	}
	err := p.m.Shutdown()
	p.finish()
	return err
}

func (p *WANPool) markClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.closed = true
	return true
}

func (p *WANPool) finish() {
	close(p.stop)
	p.wg.Wait()
	if p.coll != nil {
		p.cfg.Registerer.Unregister(p.coll)
	}
}

// wanCollector exports region reachability (few regions: bounded).
type wanCollector struct {
	p    *WANPool
	desc *prometheus.Desc
}

func (c *wanCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *wanCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.p.Regions() {
		v := 0.0
		if ok, _, _ := c.p.Region(r); ok {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, r)
	}
}

// startWAN starts the broker's WAN pool when configured. Its seeds are
// wan.seeds plus the WAN addresses of the region registry.
func (s *Server) startWAN() error {
	if !s.cfg.WAN.enabled() {
		return nil
	}
	p, err := StartWANPool(WANPoolConfig{
		Name:        s.cfg.Region + "/" + s.cfg.BrokerID,
		Region:      s.cfg.Region,
		WAN:         s.cfg.WAN,
		DialRewrite: s.cfg.DialRewrite,
		Meta:        map[string]string{"grpc": s.self.GRPC},
		Discover:    s.discoverWANSeeds,
		Logger:      s.log,
		Registerer:  s.cfg.Registerer,
	})
	if err != nil {
		return err
	}
	s.wan = p
	return nil
}

// discoverWANSeeds returns the WAN addresses of every broker in the region
// registry (stale read when the global quorum is out of reach).
func (s *Server) discoverWANSeeds(ctx context.Context) ([]string, error) {
	var kvs []metadata.KV
	page := metadata.Page{}
	for range 100 {
		res, err := s.cfg.Global.List(ctx, regionPrefix, page, metadata.ReadOptions{})
		if err != nil && !errors.Is(err, metadata.ErrNotFound) {
			res, err = s.cfg.Global.List(ctx, regionPrefix, page, metadata.ReadOptions{Stale: true})
		}
		if err != nil {
			return nil, err
		}
		kvs = append(kvs, res.KVs...)
		if !res.More || len(res.KVs) == 0 {
			break
		}
		page.After = res.KVs[len(res.KVs)-1].Key
	}
	var out []string
	for _, kv := range kvs {
		var rec RegionRecord
		if json.Unmarshal(kv.Value, &rec) != nil {
			continue
		}
		for id, b := range rec.Brokers {
			if b.WAN != "" && !(rec.Name == s.cfg.Region && id == s.cfg.BrokerID) {
				out = append(out, b.WAN)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// wanAddr is this broker's advertised WAN address ("" without a pool).
func (s *Server) wanAddr() string {
	if s.wan == nil {
		return ""
	}
	return s.wan.Addr()
}

// WANPool returns the broker's WAN pool (nil when wan is not configured).
func (s *Server) WANPool() *WANPool { return s.wan }

// RegionHealth reports, from the broker's WAN pool, whether a region is
// reachable (any of its brokers alive), when it was last seen alive, and
// ok false when the pool never saw it or there is no WAN pool.
func (s *Server) RegionHealth(name string) (reachable bool, lastSeen time.Time, ok bool) {
	if s.wan == nil {
		return false, time.Time{}, false
	}
	return s.wan.Region(name)
}

// stopWAN leaves the pool gracefully (graceful) or just stops it (crash).
func (s *Server) stopWAN(ctx context.Context, graceful bool) {
	if s.wan == nil {
		return
	}
	if !graceful {
		_ = s.wan.Close()
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.wan.Leave(lctx); err != nil {
		s.log.Debug("wan pool leave", "err", err)
	}
}
