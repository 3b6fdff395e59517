package topology

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/meridianmq/meridian/security"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrMembershipClosed is returned by calls on a Membership after Leave or Shutdown.
var ErrMembershipClosed = errors.New("topology: membership closed")

// Role is what a node does in its region.
type Role string

// Node roles carried in membership metadata.
const (
	RoleBookie Role = "bookie"
	RoleBroker Role = "broker"
	RoleMeta   Role = "meta"
)

// Profile selects memberlist's timing preset.
type Profile string

// Profiles: LAN inside a region, WAN between regions' seed nodes.
const (
	ProfileLAN Profile = "lan"
	ProfileWAN Profile = "wan"
)

// MemberState is a member's liveness as gossip sees it.
type MemberState string

// Member states.
const (
	// StateAlive: reachable, or suspected but not yet declared dead.
	StateAlive MemberState = "alive"
	// StateDead: declared dead by failure detection (crash or partition).
	StateDead MemberState = "dead"
	// StateLeft: left gracefully with Leave.
	StateLeft MemberState = "left"
)

// Member is one node as membership sees it.
type Member struct {
	// Name is the node's unique name (the bookie or broker ID).
	Name   string
	Region string
	Rack   string
	Role   Role
	// Addr is the gossip address, host:port.
	Addr string
	// Meta is the application metadata the node publishes (for example its
	// gRPC address); never nil.
	Meta  map[string]string
	State MemberState
}

// EventType says what happened to a member.
type EventType int

// Membership event types.
const (
	// EventJoin: a member became alive (joined or came back).
	EventJoin EventType = iota + 1
	// EventLeave: a member left gracefully (State left) or was declared
	// dead by failure detection (State dead).
	EventLeave
	// EventUpdate: a member's metadata changed.
	EventUpdate
	// EventResync: events were dropped because the subscriber's buffer
	// was full; Member is empty. Call Members to rebuild the view.
	EventResync
)

// String names the event type.
func (t EventType) String() string {
	switch t {
	case EventJoin:
		return "join"
	case EventLeave:
		return "leave"
	case EventUpdate:
		return "update"
	case EventResync:
		return "resync"
	}
	return "unknown"
}

// MemberEvent is one membership change delivered to a subscriber.
type MemberEvent struct {
	Type   EventType
	Member Member
}

// MembershipConfig configures a Membership.
type MembershipConfig struct {
	// NodeName is unique in the gossip cluster; required.
	NodeName string
	// Region, Rack and Role describe the node; Role is required.
	Region string
	Rack   string
	Role   Role
	// BindAddr is the gossip listen address, host:port; port 0 picks a free
	// port (see Membership.Addr). Default "127.0.0.1:0".
	BindAddr string
	// AdvertiseAddr, host:port, is what other nodes dial; empty means the
	// bound address.
	AdvertiseAddr string
	// Profile is the timing preset: memberlist.DefaultLANConfig or
	// DefaultWANConfig. Default ProfileLAN.
	Profile Profile
	// Seeds are gossip addresses (host:port) to join. Membership retries
	// the seeds that are not alive members every RejoinInterval, so start
	// order does not matter and healed partitions merge.
	Seeds []string
	// DialRewrite maps a member's gossip address to the address dialed
	// instead (a link proxy in `meridian dev`). Setting it switches gossip
	// to TCPTransport, as does TCPOnly.
	DialRewrite map[string]string
	// TCPOnly carries gossip packets over TCP as well as streams
	// (TCPTransport), so that a TCP-only link proxy can carry the pool.
	// Every member of a pool must agree: the TCP transport and memberlist's
	// default UDP+TCP one do not talk to each other. Meant for the WAN pool.
	TCPOnly bool
	// KeyFile, when set, encrypts and authenticates the pool with
	// memberlist's keyring: one base64 key (16, 24 or 32 bytes) per line,
	// the first the primary; reloaded when the file changes, so keys
	// rotate without a restart (see membership_keyring.go). Every member
	// of a pool needs it: members without the key are refused.
	KeyFile string
	// KeyReloadInterval is how often KeyFile is re-read when no
	// file-system event arrived (default 30s).
	KeyReloadInterval time.Duration
	// Meta is application metadata published with the node. The JSON
	// encoding of the whole node metadata must fit memberlist's 512 bytes.
	Meta map[string]string
	// Timings; zero keeps the profile's value. Tests shorten them for
	// failure detection within a second or two.
	ProbeInterval    time.Duration
	ProbeTimeout     time.Duration
	GossipInterval   time.Duration
	PushPullInterval time.Duration
	TCPTimeout       time.Duration
	// SuspicionMult: a suspect is declared dead after
	// SuspicionMult·log10(N)·ProbeInterval (at least one ProbeInterval).
	SuspicionMult int
	// RejoinInterval is how often unreachable seeds are retried.
	// Default 5 s (LAN) / 30 s (WAN).
	RejoinInterval time.Duration
	// EventBuffer is the default buffer of a subscription. Default 256.
	EventBuffer int
	// Logger receives membership logs (memberlist's own logs are routed
	// here at matching levels); nil discards.
	Logger *slog.Logger
	// Registerer receives the membership metrics (labelled by node); nil
	// registers nothing.
	Registerer prometheus.Registerer
}

// DefaultMembershipConfig returns a LAN config bound to 127.0.0.1:0; set
// NodeName and Role before use.
func DefaultMembershipConfig() MembershipConfig {
	return MembershipConfig{BindAddr: "127.0.0.1:0", Profile: ProfileLAN, EventBuffer: 256}
}

// WithFastFailureDetection returns c with timings for tests and local dev
// clusters on loopback: a crashed node is declared dead in about a second
// (probe every 200 ms, suspicion 2 intervals), seeds retried every 500 ms.
func (c MembershipConfig) WithFastFailureDetection() MembershipConfig {
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.SuspicionMult = 2
	c.GossipInterval = 50 * time.Millisecond
	c.PushPullInterval = 2 * time.Second
	c.TCPTimeout = time.Second
	c.RejoinInterval = 500 * time.Millisecond
	return c
}

// Validate checks the config; the error names the field.
func (c MembershipConfig) Validate() error {
	if c.NodeName == "" {
		return fmt.Errorf("%w: NodeName is required", ErrInvalidArgument)
	}
	switch c.Role {
	case RoleBookie, RoleBroker, RoleMeta:
	default:
		return fmt.Errorf("%w: Role %q must be %q, %q or %q", ErrInvalidArgument, c.Role, RoleBookie, RoleBroker, RoleMeta)
	}
	if _, _, err := splitHostPort(c.BindAddr); err != nil {
		return fmt.Errorf("%w: BindAddr %q: %v", ErrInvalidArgument, c.BindAddr, err)
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitHostPort(c.AdvertiseAddr); err != nil {
			return fmt.Errorf("%w: AdvertiseAddr %q: %v", ErrInvalidArgument, c.AdvertiseAddr, err)
		}
	}
	if c.Profile != ProfileLAN && c.Profile != ProfileWAN {
		return fmt.Errorf("%w: Profile %q must be %q or %q", ErrInvalidArgument, c.Profile, ProfileLAN, ProfileWAN)
	}
	for name, d := range map[string]time.Duration{"ProbeInterval": c.ProbeInterval, "ProbeTimeout": c.ProbeTimeout,
		"GossipInterval": c.GossipInterval, "PushPullInterval": c.PushPullInterval, "TCPTimeout": c.TCPTimeout, "RejoinInterval": c.RejoinInterval} {
		if d < 0 {
			return fmt.Errorf("%w: %s %v must be ≥ 0", ErrInvalidArgument, name, d)
		}
	}
	if c.SuspicionMult < 0 {
		return fmt.Errorf("%w: SuspicionMult %d must be ≥ 0", ErrInvalidArgument, c.SuspicionMult)
	}
	if c.EventBuffer < 1 || c.EventBuffer > 1<<16 {
		return fmt.Errorf("%w: EventBuffer %d must be in [1, 65536]", ErrInvalidArgument, c.EventBuffer)
	}
	if _, err := encodeNodeMeta(c.Region, c.Rack, c.Role, c.Meta); err != nil {
		return err
	}
	return nil
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q must be a number in [0, 65535]", p)
	}
	return host, port, nil
}

// nodeMeta is the JSON carried in memberlist's node Meta.
type nodeMeta struct {
	Region string            `json:"g,omitempty"`
	Rack   string            `json:"k,omitempty"`
	Role   Role              `json:"r"`
	Meta   map[string]string `json:"m,omitempty"`
	// Leaving is gossiped just before a graceful leave, so the others can
	// tell a leave from a death (memberlist's leave callback does not).
	Leaving bool `json:"l,omitempty"`
}

func encodeNodeMeta(region, rack string, role Role, meta map[string]string) ([]byte, error) {
	b, err := json.Marshal(nodeMeta{Region: region, Rack: rack, Role: role, Meta: meta})
	if err != nil {
		return nil, fmt.Errorf("%w: Meta: %v", ErrInvalidArgument, err)
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: node metadata is %d bytes as JSON, limit %d (shorten Meta, Region or Rack)",
			ErrInvalidArgument, len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

// Membership is this node's view of the gossip cluster: who is alive, their
// region, rack, role and metadata, and a stream of changes. It wraps a
// hashicorp/memberlist instance. Safe for concurrent use.
type Membership struct {
	cfg     MembershipConfig
	log     *slog.Logger
	ml      *memberlist.Memberlist
	metrics *membershipMetrics

	// metaMu guards meta, the encoded local node metadata.
	metaMu sync.Mutex
	meta   []byte

	// tcp is the gossip transport when DialRewrite or TCPOnly is set.
	tcp *TCPTransport
	// keyring encrypts the pool (nil without KeyFile); keyWatch reloads
	// it from KeyFile.
	keyring  *memberlist.Keyring
	keyWatch *security.Watcher

	// mu guards the fields below.
	mu      sync.Mutex
	seeds   []string          // cfg.Seeds plus AddSeeds
	members map[string]Member // live members, by name
	subs    map[*subscription]struct{}
	closed  bool

	stop chan struct{}
	done chan struct{}
}

// subscription is one bounded event stream; overflow means events were
// dropped and EventResync is owed.
type subscription struct {
	ch       chan MemberEvent
	overflow bool
}

// NewMembership starts gossip on cfg.BindAddr and joins cfg.Seeds (seeds
// that cannot be reached now are retried in the background). The local node
// is a member from the start.
func NewMembership(cfg MembershipConfig) (*Membership, error) {
	if cfg.EventBuffer == 0 {
		cfg.EventBuffer = 256
	}
	if cfg.BindAddr == "" {
		cfg.BindAddr = "127.0.0.1:0"
	}
	if cfg.Profile == "" {
		cfg.Profile = ProfileLAN
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("node", cfg.NodeName)
	meta, _ := encodeNodeMeta(cfg.Region, cfg.Rack, cfg.Role, cfg.Meta)
	metrics, err := newMembershipMetrics(cfg.Registerer, cfg.NodeName)
	if err != nil {
		return nil, err
	}
	m := &Membership{
		cfg: cfg, log: log, metrics: metrics, meta: meta,
		members: map[string]Member{},
		seeds:   slices.Clone(cfg.Seeds),
		subs:    map[*subscription]struct{}{},
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}

	var mc *memberlist.Config
	if cfg.Profile == ProfileWAN {
		mc = memberlist.DefaultWANConfig()
	} else {
		mc = memberlist.DefaultLANConfig()
	}
	mc.Name = cfg.NodeName
	host, port, _ := splitHostPort(cfg.BindAddr)
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertisePort = port
	if cfg.AdvertiseAddr != "" {
		mc.AdvertiseAddr, mc.AdvertisePort, _ = splitHostPort(cfg.AdvertiseAddr)
	}
	setDur(&mc.ProbeInterval, cfg.ProbeInterval)
	setDur(&mc.ProbeTimeout, cfg.ProbeTimeout)
	setDur(&mc.GossipInterval, cfg.GossipInterval)
	setDur(&mc.PushPullInterval, cfg.PushPullInterval)
	setDur(&mc.TCPTimeout, cfg.TCPTimeout)
	if cfg.SuspicionMult > 0 {
		mc.SuspicionMult = cfg.SuspicionMult
	}
	if cfg.KeyFile != "" {
		kr, err := newKeyring(cfg.KeyFile)
		if err != nil {
			metrics.unregister(cfg.Registerer)
			return nil, err
		}
		m.keyring = kr
		mc.Keyring = kr
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	mc.Delegate = (*delegate)(m)
	mc.Events = (*eventDelegate)(m)
	mc.Logger = newMemberlistLogger(log)
	mc.LogOutput = nil
	if cfg.TCPOnly || len(cfg.DialRewrite) > 0 {
		tr, err := NewTCPTransport(TCPTransportConfig{BindAddr: cfg.BindAddr, DialRewrite: cfg.DialRewrite, Logger: log})
		if err != nil {
			metrics.unregister(cfg.Registerer)
			return nil, err
		}
		m.tcp = tr
		mc.Transport = tr
	}

	ml, err := memberlist.Create(mc)
	if err != nil {
		if m.tcp != nil {
			_ = m.tcp.Shutdown()
		}
		metrics.unregister(cfg.Registerer)
		return nil, fmt.Errorf("topology: start memberlist on %s: %w", cfg.BindAddr, err)
	}
	m.ml = ml
	if m.keyring != nil {
		if err := m.watchKeys(log); err != nil {
			_ = ml.Shutdown()
			metrics.unregister(cfg.Registerer)
			return nil, err
		}
	}
	if len(cfg.Seeds) > 0 {
		if n, err := ml.Join(cfg.Seeds); err != nil {
			log.Warn("membership: could not reach seeds yet; retrying in the background", "seeds", cfg.Seeds, "joined", n, "err", err)
		}
	}
	go m.rejoinLoop()
	return m, nil
}

// AddSeeds adds gossip addresses to join now and to retry like
// cfg.Seeds (for example addresses found in a registry after start).
func (m *Membership) AddSeeds(addrs ...string) {
	m.mu.Lock()
	var added []string
	for _, a := range addrs {
		if a != "" && !slices.Contains(m.seeds, a) {
			m.seeds = append(m.seeds, a)
			added = append(added, a)
		}
	}
	closed := m.closed
	m.mu.Unlock()
	if len(added) == 0 || closed {
		return
	}
	go func() {
		if _, err := m.ml.Join(added); err != nil {
			m.log.Debug("membership: new seeds not reachable yet; retrying in the background", "seeds", added, "err", err)
		}
	}()
}

func setDur(dst *time.Duration, v time.Duration) {
	if v > 0 {
		*dst = v
	}
}

// Addr returns the gossip address other nodes use as a seed, host:port.
func (m *Membership) Addr() string {
	n := m.ml.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// LocalName returns this node's name.
func (m *Membership) LocalName() string { return m.cfg.NodeName }

// Members returns the live members (alive or suspected, not yet declared
// dead), this node included, sorted by name.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Member, 0, len(m.members))
	for _, mem := range m.members {
		out = append(out, copyMember(mem))
	}
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// Member returns one live member by name.
func (m *Membership) Member(name string) (Member, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mem, ok := m.members[name]
	return copyMember(mem), ok
}

func copyMember(mem Member) Member {
	meta := make(map[string]string, len(mem.Meta))
	for k, v := range mem.Meta {
		meta[k] = v
	}
	mem.Meta = meta
	return mem
}

// Subscribe returns a stream of membership changes from now on, with a
// buffer of buffer events (≤ 0: cfg.EventBuffer). Delivery never blocks
// gossip: when the buffer is full, events are dropped and an EventResync
// is delivered as soon as there is room. cancel ends the subscription and
// closes the channel; the channel is also closed by Leave and Shutdown.
func (m *Membership) Subscribe(buffer int) (events <-chan MemberEvent, cancel func()) {
	if buffer <= 0 {
		buffer = m.cfg.EventBuffer
	}
	sub := &subscription{ch: make(chan MemberEvent, min(buffer, 1<<16))}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		close(sub.ch)
		return sub.ch, func() {}
	}
	m.subs[sub] = struct{}{}
	return sub.ch, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, ok := m.subs[sub]; ok {
			delete(m.subs, sub)
			close(sub.ch)
		}
	}
}

// UpdateMeta replaces this node's application metadata and gossips it; it
// waits until the update reached at least one other member or ctx ends
// (other members still converge by gossip afterwards).
func (m *Membership) UpdateMeta(ctx context.Context, meta map[string]string) error {
	enc, err := encodeNodeMeta(m.cfg.Region, m.cfg.Rack, m.cfg.Role, meta)
	if err != nil {
		return err
	}
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return ErrMembershipClosed
	}
	m.metaMu.Lock()
	m.meta = enc
	m.metaMu.Unlock()
	timeout := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	if err := m.ml.UpdateNode(timeout); err != nil {
		return fmt.Errorf("topology: gossip metadata update: %w", err)
	}
	return nil
}

// Leave announces a graceful departure (others see State left, not dead),
// waiting for the broadcast until ctx ends, then shuts down.
func (m *Membership) Leave(ctx context.Context) error {
	if !m.markClosed() {
		return ErrMembershipClosed
	}
	timeout := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	m.metaMu.Lock()
	var nm nodeMeta
	_ = json.Unmarshal(m.meta, &nm)
	nm.Leaving = true
	if enc, err := json.Marshal(nm); err == nil && len(enc) <= memberlist.MetaMaxSize {
		m.meta = enc
	}
	m.metaMu.Unlock()
	if err := m.ml.UpdateNode(timeout / 2); err != nil {
		m.log.Debug("membership: leaving flag not acknowledged", "err", err)
	}
	lerr := m.ml.Leave(timeout / 2)
	serr := m.ml.Shutdown()
	m.finish()
	if lerr != nil {
		return fmt.Errorf("topology: leave: %w", lerr)
	}
	return serr
}

// Shutdown stops gossip without a leave message: to the others the node
// looks crashed and is declared dead by failure detection. Safe to call
// more than once.
func (m *Membership) Shutdown() error {
	if !m.markClosed() {
		return nil
	}
	err := m.ml.Shutdown()
	m.finish()
	return err
}

// markClosed flips closed and reports whether this call did it.
func (m *Membership) markClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.closed = true
	return true
}

// finish stops the background loop, closes every subscription and
// unregisters the metrics (so the node can be restarted in-process).
func (m *Membership) finish() {
	close(m.stop)
	<-m.done
	if m.keyWatch != nil {
		_ = m.keyWatch.Close()
	}
	m.metrics.unregister(m.cfg.Registerer)
	m.mu.Lock()
	defer m.mu.Unlock()
	for sub := range m.subs {
		close(sub.ch)
	}
	m.subs = map[*subscription]struct{}{}
}

// rejoinLoop retries seeds that are not alive members, so nodes started
// before their seeds, and sides of a healed partition that already
// forgot each other, find each other again.
func (m *Membership) rejoinLoop() {
	defer close(m.done)
	every := m.cfg.RejoinInterval
	if every == 0 {
		every = 5 * time.Second
		if m.cfg.Profile == ProfileWAN {
			every = 30 * time.Second
		}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		known := map[string]bool{}
		m.mu.Lock()
		for _, mem := range m.members {
			known[mem.Addr] = true
		}
		seeds := slices.Clone(m.seeds)
		m.mu.Unlock()
		var missing []string
		for _, s := range seeds {
			if !known[s] && s != m.Addr() {
				missing = append(missing, s)
			}
		}
		if len(missing) == 0 {
			continue
		}
		if _, err := m.ml.Join(missing); err != nil {
			m.log.Debug("membership: seeds still unreachable", "seeds", missing, "err", err)
		}
	}
}

// publish records a change and fans it out without blocking. Called by
// memberlist's event delegate (under memberlist's node lock).
func (m *Membership) publish(t EventType, n *memberlist.Node) {
	mem := m.toMember(t, n)
	m.mu.Lock()
	defer m.mu.Unlock()
	switch t {
	case EventLeave:
		delete(m.members, mem.Name)
	default:
		m.members[mem.Name] = mem
	}
	m.metrics.events.WithLabelValues(t.String()).Inc()
	m.metrics.members.Set(float64(len(m.members)))
	if m.closed {
		return
	}
	for sub := range m.subs {
		if sub.overflow {
			select {
			case sub.ch <- MemberEvent{Type: EventResync}:
				sub.overflow = false
			default:
				m.metrics.dropped.Inc()
				continue
			}
		}
		select {
		case sub.ch <- MemberEvent{Type: t, Member: copyMember(mem)}:
		default:
			sub.overflow = true
			m.metrics.dropped.Inc()
		}
	}
}

func (m *Membership) toMember(t EventType, n *memberlist.Node) Member {
	mem := Member{
		Name:  n.Name,
		Addr:  net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))),
		Meta:  map[string]string{},
		State: StateAlive,
	}
	var nm nodeMeta
	if len(n.Meta) > 0 {
		if err := json.Unmarshal(n.Meta, &nm); err != nil {
			m.log.Warn("membership: undecodable node metadata", "member", n.Name, "err", err)
		}
	}
	if t == EventLeave {
		// memberlist's Node.State is not updated before the callback; the
		// Leaving flag tells a graceful leave from a death.
		mem.State = StateDead
		if nm.Leaving {
			mem.State = StateLeft
		}
	}
	mem.Region, mem.Rack, mem.Role = nm.Region, nm.Rack, nm.Role
	for k, v := range nm.Meta {
		mem.Meta[k] = v
	}
	return mem
}

// delegate gives memberlist the local node metadata; no user messages.
type delegate Membership

func (d *delegate) NodeMeta(limit int) []byte {
	d.metaMu.Lock()
	defer d.metaMu.Unlock()
	if len(d.meta) > limit {
		return nil // cannot happen: sizes are checked against MetaMaxSize
	}
	return slices.Clone(d.meta)
}
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// eventDelegate turns memberlist callbacks into MemberEvents.
type eventDelegate Membership

func (e *eventDelegate) NotifyJoin(n *memberlist.Node) {
	(*Membership)(e).publish(EventJoin, n)
}
func (e *eventDelegate) NotifyLeave(n *memberlist.Node) {
	(*Membership)(e).publish(EventLeave, n)
}
func (e *eventDelegate) NotifyUpdate(n *memberlist.Node) {
	(*Membership)(e).publish(EventUpdate, n)
}

// membershipMetrics are labelled by node name (a handful per process).
type membershipMetrics struct {
	members prometheus.Gauge
	events  *prometheus.CounterVec
	dropped prometheus.Counter
	// keyReloadFailures counts refused KeyFile reloads.
	keyReloadFailures prometheus.Counter
}

func newMembershipMetrics(reg prometheus.Registerer, node string) (*membershipMetrics, error) {
	labels := prometheus.Labels{"node": node}
	m := &membershipMetrics{
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_membership_members", Help: "Alive and suspect gossip members known to this node, itself included.",
			ConstLabels: labels,
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_membership_events_total", Help: "Membership changes seen, by type (join, leave, update).",
			ConstLabels: labels,
		}, []string{"type"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_membership_events_dropped_total", Help: "Membership events dropped because a subscriber's buffer was full.",
			ConstLabels: labels,
		}),
		keyReloadFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_membership_keyring_reload_failures_total", Help: "Reloads of the gossip key file refused (bad file): the keyring stays as it was.",
			ConstLabels: labels,
		}),
	}
	if reg != nil {
		for i, c := range m.collectors() {
			if err := reg.Register(c); err != nil {
				for _, done := range m.collectors()[:i] {
					reg.Unregister(done)
				}
				return nil, fmt.Errorf("topology: register membership metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *membershipMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.members, m.events, m.dropped, m.keyReloadFailures}
}

func (m *membershipMetrics) unregister(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	for _, c := range m.collectors() {
		reg.Unregister(c)
	}
}
