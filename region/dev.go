//go:build unix

package region

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meridianmq/meridian/chaos"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/security"
	"gopkg.in/yaml.v3"
)

// Files of a dev cluster's data directory.
const (
	// DevPlanFile records the cluster's layout: regions, process IDs and
	// ports, proxies, control address. A restart on the same directory
	// reads it and starts the same cluster.
	DevPlanFile = "dev.json"
	// DevClusterFile is written once every region is ready and removed at
	// shutdown: the regions' first brokers and the control address.
	DevClusterFile = "cluster.json"
)

// Limits of a dev cluster.
const (
	maxDevRegions   = 9
	maxDevProcesses = 9 // bookies or brokers per region
	maxDevLatency   = time.Minute
)

// Process roles of a dev cluster.
const (
	RoleMeta   = "meta"
	RoleBookie = "bookie"
	RoleBroker = "broker"
)

// DevConfig configures `meridian dev`: a multi-region cluster of separate
// OS processes on 127.0.0.1, with every region-to-region connection going
// through a chaos link proxy of the dev process.
type DevConfig struct {
	// Binary is the meridian executable the processes run
	// (`meta|bookie|broker --config FILE`). Required.
	Binary string
	// DataDir holds configs, data and logs: DataDir/<region>/<role>-<i>...
	// (default "meridian-dev").
	DataDir string
	// Regions are the region names (1 to 9, lowercase letters, digits and
	// '-'). On a restart they must equal the recorded ones.
	Regions []string
	// WANLatency and Jitter are the initial one-way latency and jitter of
	// every link between two regions (default 0).
	WANLatency time.Duration
	Jitter     time.Duration
	// Bookies and Brokers per region (1 to 9; defaults 3 and 2); bookies
	// are spread over Racks racks (1 to Bookies, default 2 or Bookies if
	// fewer). Fixed by the first start.
	Bookies int
	Racks   int
	Brokers int
	// ReadyTimeout bounds the start of the whole cluster (default 3m).
	ReadyTimeout time.Duration
	// FaultInjection starts bookies and metadata nodes with their fault
	// controls (disk faults, clock skew, test-only unsafe modes) and
	// enables the control API's /v1/disk and /v1/clock. Chaos runs only.
	FaultInjection bool
	// UnsafeAckBeforeSync (needs FaultInjection) runs every bookie with
	// unsafe_ack_before_sync: adds acknowledged before their fsync, a
	// deliberately broken build for the chaos suite's own test.
	UnsafeAckBeforeSync bool
	// Insecure runs the processes in plaintext without authentication (as
	// before dev was secured by default; dev_security.go). The control
	// endpoint requires its token either way.
	Insecure bool
	// Logger receives the dev process's own logs (default: discard).
	Logger *slog.Logger
}

// DefaultDevConfig returns the defaults of `meridian dev`.
func DefaultDevConfig() DevConfig {
	return DevConfig{DataDir: "meridian-dev", Bookies: 3, Racks: 2, Brokers: 2, ReadyTimeout: 3 * time.Minute}
}

var regionName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

// ValidateRegionName reports whether name can name a dev region.
func ValidateRegionName(name string) error {
	if !regionName.MatchString(name) || name == metadata.GlobalShard {
		return fmt.Errorf("region %q: want 1 to 32 lowercase letters, digits or '-' (not %q)", name, metadata.GlobalShard)
	}
	return nil
}

// Validate reports the first bad field by its flag name.
func (c *DevConfig) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("dev: binary must be set")
	case c.DataDir == "":
		return errors.New("dev: --data-dir must be set")
	case len(c.Regions) == 0 || len(c.Regions) > maxDevRegions:
		return fmt.Errorf("dev: --regions lists %d regions, want 1 to %d", len(c.Regions), maxDevRegions)
	case c.Bookies < 1 || c.Bookies > maxDevProcesses:
		return fmt.Errorf("dev: --bookies %d must be in [1, %d]", c.Bookies, maxDevProcesses)
	case c.Brokers < 1 || c.Brokers > maxDevProcesses:
		return fmt.Errorf("dev: --brokers %d must be in [1, %d]", c.Brokers, maxDevProcesses)
	case c.Racks < 1 || c.Racks > c.Bookies:
		return fmt.Errorf("dev: --racks %d must be in [1, --bookies %d]", c.Racks, c.Bookies)
	case c.WANLatency < 0 || c.WANLatency > maxDevLatency:
		return fmt.Errorf("dev: --wan-latency %v must be in [0, %v]", c.WANLatency, maxDevLatency)
	case c.Jitter < 0 || c.Jitter > maxDevLatency:
		return fmt.Errorf("dev: --jitter %v must be in [0, %v]", c.Jitter, maxDevLatency)
	case c.UnsafeAckBeforeSync && !c.FaultInjection:
		return errors.New("dev: --unsafe-ack-before-sync needs --fault-injection")
	case c.ReadyTimeout <= 0:
		return fmt.Errorf("dev: ready timeout %v must be positive", c.ReadyTimeout)
	}
	seen := map[string]bool{}
	for _, r := range c.Regions {
		if err := ValidateRegionName(r); err != nil {
			return fmt.Errorf("dev: --regions: %w", err)
		}
		if seen[r] {
			return fmt.Errorf("dev: --regions: region %q is repeated", r)
		}
		seen[r] = true
	}
	return nil
}

// DevPlan is the layout of a dev cluster, recorded in DataDir/dev.json so
// that a restart keeps IDs, ports and data.
type DevPlan struct {
	Regions []DevRegionPlan `json:"regions"`
	Racks   int             `json:"racks"`
	// Control is the control server's address.
	Control string `json:"control"`
	// Proxies are the link proxies: one per (source region, remote
	// endpoint) for the region links, and one per (source process,
	// target process) inside a region for the process links (From and To
	// "<region>/<role>-<index>", see dev_link.go).
	Proxies []DevProxyPlan `json:"proxies"`

	// listeners are the ports this process serves itself (control, link
	// proxies), still bound since they were picked: handed to the proxies
	// and the control server so that nothing else can take them between
	// the pick and the serve.
	listeners map[string]net.Listener
}

// takeListener returns the held listener of addr (nil: none; bind it).
func (p *DevPlan) takeListener(addr string) net.Listener {
	l := p.listeners[addr]
	delete(p.listeners, addr)
	return l
}

// closeListeners closes the listeners nothing took.
func (p *DevPlan) closeListeners() {
	for a, l := range p.listeners {
		l.Close()
		delete(p.listeners, a)
	}
}

// DevRegionPlan is one region's processes.
type DevRegionPlan struct {
	Name string `json:"name"`
	// ShardID is the Raft shard ID of the region's metadata shard (the
	// global shard is 1).
	ShardID uint64        `json:"shard_id"`
	Meta    []DevNodePlan `json:"meta"`
	Bookies []DevNodePlan `json:"bookies"`
	Brokers []DevNodePlan `json:"brokers"`
}

// DevNodePlan is one process's identity and addresses.
type DevNodePlan struct {
	ID     string `json:"id"`
	NodeID uint64 `json:"node_id,omitempty"` // metadata replica ID
	Rack   string `json:"rack,omitempty"`
	Raft   string `json:"raft,omitempty"`
	GRPC   string `json:"grpc"`
	HTTP   string `json:"http"`
	// WAN is a broker's WAN membership (gossip over TCP) address.
	WAN string `json:"wan,omitempty"`
}

// DevProxyPlan is one link proxy: traffic of region From to Target, an
// endpoint of region To, enters at Listen.
type DevProxyPlan struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Kind is what Target serves: "raft" (a metadata node), "grpc",
	// "http" or "wan" (a broker).
	Kind   string `json:"kind"`
	Target string `json:"target"`
	Listen string `json:"listen"`
}

// DevClusterInfo is the content of cluster.json.
type DevClusterInfo struct {
	Regions []DevClusterRegion `json:"regions"`
	Control string             `json:"control"`
	// ControlToken is the file holding the control endpoint's bearer
	// token (DataDir/control.token, mode 0600).
	ControlToken string `json:"control_token,omitempty"`
	// CA is the CA bundle (PEM) the processes' certificates chain to, and
	// AdminToken the file of a superuser token: the credentials of a
	// secured cluster ("" with --insecure).
	CA         string `json:"ca,omitempty"`
	AdminToken string `json:"admin_token,omitempty"`
	// Addresses are every broker's and metadata node's gRPC and HTTP
	// addresses, and the gRPC and HTTP link proxies' in front of them: the
	// CLI recognises the cluster's addresses by them.
	Addresses []string `json:"addresses,omitempty"`
}

// DevClusterRegion is a region's first broker in cluster.json.
type DevClusterRegion struct {
	Name string `json:"name"`
	GRPC string `json:"grpc"`
	HTTP string `json:"http"`
}

// ReadDevCluster reads dataDir/cluster.json.
func ReadDevCluster(dataDir string) (DevClusterInfo, error) {
	var info DevClusterInfo
	b, err := os.ReadFile(filepath.Join(dataDir, DevClusterFile))
	if err != nil {
		return info, fmt.Errorf("dev: no running cluster found (is `meridian dev --data-dir %s` running and ready?): %w", dataDir, err)
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("dev: %s: %w", filepath.Join(dataDir, DevClusterFile), err)
	}
	if info.Control == "" {
		return info, fmt.Errorf("dev: %s has no control address", filepath.Join(dataDir, DevClusterFile))
	}
	if info.ControlToken == "" {
		info.ControlToken = filepath.Join(dataDir, DevControlTokenFile)
	}
	return info, nil
}

// portPicker hands out free loopback ports, keeping each listener open
// until done so that no two picks collide.
type portPicker struct{ held []net.Listener }

func (pp *portPicker) pick() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("dev: pick a free port: %w", err)
	}
	pp.held = append(pp.held, l)
	return l.Addr().String(), nil
}

// keep returns addr if it can be bound now, else a fresh port.
func (pp *portPicker) keep(addr string) (string, bool, error) {
	if l, err := net.Listen("tcp", addr); err == nil {
		pp.held = append(pp.held, l)
		return addr, true, nil
	}
	a, err := pp.pick()
	return a, false, err
}

func (pp *portPicker) done() {
	for _, l := range pp.held {
		l.Close()
	}
	pp.held = nil
}

// handOver moves the held listeners of the addresses p's own process
// serves (control, proxies) into p, still bound; done closes the others,
// which the cluster's processes bind.
func (pp *portPicker) handOver(p *DevPlan) {
	own := map[string]bool{p.Control: true}
	for _, x := range p.Proxies {
		own[x.Listen] = true
	}
	p.listeners = map[string]net.Listener{}
	kept := pp.held[:0]
	for _, l := range pp.held {
		if a := l.Addr().String(); own[a] && p.listeners[a] == nil {
			p.listeners[a] = l
			continue
		}
		kept = append(kept, l)
	}
	pp.held = kept
}

// newDevPlan lays out a fresh cluster on free ports.
func newDevPlan(cfg DevConfig) (*DevPlan, error) {
	var pp portPicker
	defer pp.done()
	var err error
	addr := func() string {
		var a string
		if err == nil {
			a, err = pp.pick()
		}
		return a
	}
	p := &DevPlan{Racks: cfg.Racks, Control: addr()}
	for ri, name := range cfg.Regions {
		r := DevRegionPlan{Name: name, ShardID: uint64(ri + 2)}
		r.Meta = []DevNodePlan{{ID: name + "-meta-0", NodeID: uint64(ri + 1), Raft: addr(), GRPC: addr(), HTTP: addr()}}
		for i := range cfg.Bookies {
			r.Bookies = append(r.Bookies, DevNodePlan{ID: fmt.Sprintf("%s-bookie-%d", name, i), Rack: fmt.Sprintf("rack-%d", i%cfg.Racks), GRPC: addr(), HTTP: addr()})
		}
		for i := range cfg.Brokers {
			r.Brokers = append(r.Brokers, DevNodePlan{ID: fmt.Sprintf("%s-broker-%d", name, i), GRPC: addr(), HTTP: addr(), WAN: addr()})
		}
		p.Regions = append(p.Regions, r)
	}
	for _, s := range p.Regions {
		for _, r := range p.Regions {
			if r.Name == s.Name {
				continue
			}
			// The global shard's Raft traffic between regions.
			for _, m := range r.Meta {
				p.Proxies = append(p.Proxies, DevProxyPlan{From: s.Name, To: r.Name, Kind: "raft", Target: m.Raft, Listen: addr()})
			}
			for _, b := range r.Brokers {
				p.Proxies = append(p.Proxies,
					DevProxyPlan{From: s.Name, To: r.Name, Kind: "grpc", Target: b.GRPC, Listen: addr()},
					DevProxyPlan{From: s.Name, To: r.Name, Kind: "http", Target: b.HTTP, Listen: addr()},
					DevProxyPlan{From: s.Name, To: r.Name, Kind: "wan", Target: b.WAN, Listen: addr()})
			}
		}
	}
	planProcessProxies(p, addr)
	if err == nil {
		pp.handOver(p)
	}
	return p, err
}

// loadDevPlan reads a recorded plan and checks it against cfg's layout
// flags; ports that are taken now are moved (except Raft addresses, which
// the metadata nodes recorded in their data).
func loadDevPlan(cfg DevConfig, path string, log *slog.Logger) (*DevPlan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var p DevPlan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("dev: %s: %w", path, err)
	}
	var names []string
	for _, r := range p.Regions {
		names = append(names, r.Name)
	}
	switch {
	case len(p.Regions) == 0 || len(p.Regions[0].Meta) == 0:
		return nil, fmt.Errorf("dev: %s records no regions: remove it or use another --data-dir", path)
	case !slices.Equal(names, cfg.Regions):
		return nil, fmt.Errorf("dev: --regions %s differs from %s recorded in %s (use another --data-dir)", strings.Join(cfg.Regions, ","), strings.Join(names, ","), path)
	case len(p.Regions[0].Bookies) != cfg.Bookies:
		return nil, fmt.Errorf("dev: --bookies %d differs from %d recorded in %s", cfg.Bookies, len(p.Regions[0].Bookies), path)
	case len(p.Regions[0].Brokers) != cfg.Brokers:
		return nil, fmt.Errorf("dev: --brokers %d differs from %d recorded in %s", cfg.Brokers, len(p.Regions[0].Brokers), path)
	case p.Racks != cfg.Racks:
		return nil, fmt.Errorf("dev: --racks %d differs from %d recorded in %s", cfg.Racks, p.Racks, path)
	}
	var pp portPicker
	defer pp.done()
	keep := func(what string, a *string) error {
		na, same, err := pp.keep(*a)
		if err != nil {
			return err
		}
		if !same {
			log.Warn("recorded port is taken: using another", "what", what, "recorded", *a, "now", na)
			*a = na
		}
		return nil
	}
	moved := map[string]string{}
	if err := keep("control", &p.Control); err != nil {
		return nil, err
	}
	for ri := range p.Regions {
		r := &p.Regions[ri]
		for i := range r.Meta {
			m := &r.Meta[i]
			if l, err := net.Listen("tcp", m.Raft); err != nil {
				return nil, fmt.Errorf("dev: %s raft address %s (recorded in its data) is taken: free it and retry: %w", m.ID, m.Raft, err)
			} else {
				pp.held = append(pp.held, l)
			}
			g := m.GRPC
			if err := errors.Join(keep(m.ID+" grpc", &m.GRPC), keep(m.ID+" http", &m.HTTP)); err != nil {
				return nil, err
			}
			moved[g] = m.GRPC
		}
		for _, nodes := range [][]DevNodePlan{r.Bookies, r.Brokers} {
			for i := range nodes {
				n := &nodes[i]
				g, h, w := n.GRPC, n.HTTP, n.WAN
				if err := errors.Join(keep(n.ID+" grpc", &n.GRPC), keep(n.ID+" http", &n.HTTP)); err != nil {
					return nil, err
				}
				moved[g], moved[h] = n.GRPC, n.HTTP
				if n.WAN != "" {
					if err := keep(n.ID+" wan", &n.WAN); err != nil {
						return nil, err
					}
					moved[w] = n.WAN
				}
			}
		}
	}
	for i := range p.Proxies {
		x := &p.Proxies[i]
		if to, ok := moved[x.Target]; ok {
			x.Target = to
		}
		if err := keep("proxy "+x.From+"→"+x.To, &x.Listen); err != nil {
			return nil, err
		}
	}
	if !hasProcessProxies(&p) {
		// Recorded before process links existed: add them.
		var err error
		planProcessProxies(&p, func() string {
			var a string
			if err == nil {
				a, err = pp.pick()
			}
			return a
		})
		if err != nil {
			return nil, err
		}
		log.Info("process links added to the recorded plan")
	}
	pp.handOver(&p)
	return &p, nil
}

func writePlan(path string, p *DevPlan) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err == nil {
		err = writeFileAtomic(path, append(b, '\n'))
	}
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	return nil
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func writeYAML(path string, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, b)
}

// devProc is one process of the cluster.
type devProc struct {
	role   string
	region string
	index  int
	node   DevNodePlan
	p      *chaos.Process
}

// Dev is a running `meridian dev` cluster. Its processes are children of
// this process; Stop ends them all.
type Dev struct {
	cfg  DevConfig
	plan *DevPlan
	log  *slog.Logger
	net  *chaos.Network

	procs   []*devProc // metas, then bookies, then brokers, region by region
	control *http.Server
	ctlLis  net.Listener

	// rebuildMu serializes region rebuilds (dev_rebuild.go), which change
	// the plan's regional shard IDs and rewrite dev.json.
	rebuildMu sync.Mutex
	stopOnce  sync.Once

	// sec is the provisioned credentials (zero with Insecure), rt the dev
	// process's client runtime with the CA and the admin token (nil with
	// Insecure), ctlToken the control endpoint's token.
	sec      security.Provisioned
	rt       *security.Runtime
	ctlToken string
	// hc is the HTTP client of the processes' endpoints (httpClient).
	hcOnce sync.Once
	hc     *http.Client
}

// StartDev lays out (or reloads from DataDir/dev.json) and starts the
// cluster: link proxies, control server, every region's metadata node,
// bookies and brokers. It returns once every region's first broker is
// ready and public/default exists, after writing DataDir/cluster.json. On
// error everything started is stopped again.
func StartDev(ctx context.Context, cfg DevConfig) (*Dev, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("dev: --data-dir: %w", err)
	}
	cfg.DataDir = dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("dev: --data-dir: %w", err)
	}
	// A cluster.json left by a dev process killed with SIGKILL is stale.
	_ = os.Remove(filepath.Join(dir, DevClusterFile))
	planPath := filepath.Join(dir, DevPlanFile)
	plan, err := loadDevPlan(cfg, planPath, log)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if plan, err = newDevPlan(cfg); err != nil {
			return nil, err
		}
		log.Info("new dev cluster", "dir", dir, "regions", cfg.Regions)
	case err != nil:
		return nil, err
	default:
		log.Info("restarting recorded dev cluster", "dir", dir, "regions", cfg.Regions)
	}
	if err := writePlan(planPath, plan); err != nil {
		return nil, err
	}
	d := &Dev{cfg: cfg, plan: plan, log: log, net: chaos.NewNetwork(log.With("component", "linkproxy"))}
	if err := d.setupSecurity(); err != nil {
		d.Stop(context.Background())
		return nil, err
	}
	if err := d.start(ctx); err != nil {
		d.Stop(context.Background())
		return nil, err
	}
	return d, nil
}

func (d *Dev) start(ctx context.Context) error {
	for _, x := range d.plan.Proxies {
		var err error
		if l := d.plan.takeListener(x.Listen); l != nil {
			_, err = d.net.ProxyOn(x.From, x.To, l, x.Target)
		} else {
			_, err = d.net.Proxy(x.From, x.To, x.Listen, x.Target)
		}
		if err != nil {
			return err
		}
	}
	for i, a := range d.plan.Regions {
		for _, b := range d.plan.Regions[i+1:] {
			if err := d.net.SetLatency(a.Name, b.Name, d.cfg.WANLatency, d.cfg.Jitter); err != nil {
				return err
			}
		}
	}
	if err := d.writeConfigs(); err != nil {
		return err
	}
	if err := d.startControl(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ReadyTimeout)
	defer cancel()
	// Metadata first, all together: the global shard needs a quorum of
	// regions before any node is ready.
	if err := d.startRoles(ctx, ""); err != nil {
		return err
	}
	for _, r := range d.plan.Regions {
		if err := d.waitNamespace(ctx, r.Brokers[0].HTTP, "public/default"); err != nil {
			return fmt.Errorf("dev: region %s: %w", r.Name, err)
		}
	}
	b, _ := json.MarshalIndent(d.Info(), "", "  ")
	if err := writeFileAtomic(filepath.Join(d.cfg.DataDir, DevClusterFile), append(b, '\n')); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	d.register()
	return nil
}

// startRoles starts the processes of region (every region if "") role by
// role, metadata nodes, then bookies, then brokers, and waits until each
// role's processes are ready before starting the next.
func (d *Dev) startRoles(ctx context.Context, region string) error {
	for _, role := range []string{RoleMeta, RoleBookie, RoleBroker} {
		var group []*devProc
		for _, p := range d.procs {
			if p.role == role && (region == "" || p.region == region) {
				group = append(group, p)
			}
		}
		for _, p := range group {
			if err := p.p.Start(); err != nil {
				return err
			}
		}
		errs := make([]error, len(group))
		var wg sync.WaitGroup
		for i, p := range group {
			wg.Go(func() { errs[i] = p.p.WaitReady(ctx) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		d.log.Info("processes ready", "role", role, "count", len(group), "region", region)
	}
	return nil
}

// waitNamespace polls a broker's admin API until namespace ns exists.
func (d *Dev) waitNamespace(ctx context.Context, brokerHTTP, ns string) error {
	client := d.httpClient(5 * time.Second)
	body := fmt.Sprintf(`{"namespace":%q}`, ns)
	last := ""
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.scheme()+"://"+brokerHTTP+"/admin/v1/GetNamespacePolicies", strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if resp, err := client.Do(req); err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, b)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s not found through %s: %w (last: %s)", ns, brokerHTTP, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// writeConfigs writes every process's config under DataDir/<region> and
// creates the processes (not started).
func (d *Dev) writeConfigs() error {
	// Cross-region addresses a region's brokers dial go through its
	// proxies (brokers of other regions); metadata nodes: metaConfig.
	rewrite := map[string]map[string]string{}
	for _, x := range d.plan.Proxies {
		if x.Kind == "raft" {
			continue
		}
		if rewrite[x.From] == nil {
			rewrite[x.From] = map[string]string{}
		}
		rewrite[x.From][x.Target] = x.Listen
	}
	for _, r := range d.plan.Regions {
		rdir := filepath.Join(d.cfg.DataDir, r.Name)
		if err := os.MkdirAll(rdir, 0o700); err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		var metaGRPC []string
		for i, m := range r.Meta {
			metaGRPC = append(metaGRPC, m.GRPC)
			if err := d.addProc(RoleMeta, r.Name, i, m, d.metaConfig(r, i)); err != nil {
				return err
			}
		}
		for i, b := range r.Bookies {
			bdir := filepath.Join(rdir, fmt.Sprintf("bookie-%d", i))
			cfg := map[string]any{
				"id":          b.ID,
				"region":      r.Name,
				"rack":        b.Rack,
				"listen_addr": b.GRPC,
				"http_addr":   b.HTTP,
				"journal_dir": filepath.Join(bdir, "journal"),
				"ledger_dir":  filepath.Join(bdir, "ledgers"),
				"metadata":    map[string]any{"endpoints": metaGRPC, "shard": r.Name},
			}
			if rw := d.processRewrite(DevProcessName(r.Name, RoleBookie, i)); len(rw) > 0 {
				cfg["dial_rewrite"] = rw
			}
			if err := d.addProc(RoleBookie, r.Name, i, b, cfg); err != nil {
				return err
			}
		}
		e, qw, qa := quorums(len(r.Bookies))
		var wanSeeds []string
		for _, rr := range d.plan.Regions {
			for _, b := range rr.Brokers {
				if b.WAN != "" {
					wanSeeds = append(wanSeeds, b.WAN)
				}
			}
		}
		for i, b := range r.Brokers {
			bc := map[string]any{
				"broker_id":             b.ID,
				"region":                r.Name,
				"grpc_address":          b.GRPC,
				"http_address":          b.HTTP,
				"default_ensemble_size": e,
				"default_write_quorum":  qw,
				"default_ack_quorum":    qa,
				// Like standalone: public/default keeps a week (10 GiB per
				// topic), so a later subscription or a region added to a
				// namespace finds the history.
				"default_retention_time":       "168h",
				"default_retention_size_bytes": 10 << 30,
			}
			if rw := mergeRewrite(rewrite[r.Name], d.processRewrite(DevProcessName(r.Name, RoleBroker, i))); len(rw) > 0 {
				bc["dial_rewrite"] = rw
			}
			if b.WAN != "" {
				// Region health: every broker gossips with every other,
				// across regions through the proxies (dial_rewrite).
				bc["wan"] = map[string]any{
					"bind_address":           b.WAN,
					"seeds":                  slices.DeleteFunc(slices.Clone(wanSeeds), func(s string) bool { return s == b.WAN }),
					"fast_failure_detection": true,
					"discover_interval":      "2s",
				}
			}
			cfg := map[string]any{
				"broker":    bc,
				"metadata":  map[string]any{"endpoints": metaGRPC, "regional_shard": r.Name},
				"placement": map[string]any{"min_racks_per_write_quorum": 1},
			}
			if err := d.addProc(RoleBroker, r.Name, i, b, cfg); err != nil {
				return err
			}
		}
	}
	slices.SortStableFunc(d.procs, func(a, b *devProc) int { return roleOrder(a.role) - roleOrder(b.role) })
	return nil
}

// metaConfig is the config of metadata node i of region r: a replica of
// the global shard (one member per region) and of r's own shard, whose
// Raft shard ID is r.ShardID (a rebuilt region gets a new one,
// dev_rebuild.go).
func (d *Dev) metaConfig(r DevRegionPlan, i int) map[string]any {
	globalMembers := map[uint64]string{}
	for _, rr := range d.plan.Regions {
		for _, m := range rr.Meta {
			globalMembers[m.NodeID] = m.Raft
		}
	}
	regional := map[uint64]string{}
	for _, mm := range r.Meta {
		regional[mm.NodeID] = mm.Raft
	}
	// Raft peers of other regions are dialed through r's proxies.
	raftRewrite := map[string]string{}
	for _, x := range d.plan.Proxies {
		if x.Kind == "raft" && x.From == r.Name {
			raftRewrite[x.Target] = x.Listen
		}
	}
	m := r.Meta[i]
	cfg := map[string]any{
		"node_id":      m.NodeID,
		"raft_address": m.Raft,
		"grpc_address": m.GRPC,
		"http_address": m.HTTP,
		"data_dir":     filepath.Join(d.cfg.DataDir, r.Name, fmt.Sprintf("meta-%d", i)),
		"shards": []map[string]any{
			{"name": metadata.GlobalShard, "shard_id": 1, "members": globalMembers},
			{"name": r.Name, "shard_id": r.ShardID, "members": regional},
		},
		"rtt": d.raftRTT().String(),
		// Meridian's Raft transport (metadata/transport.go) dials
		// through raft_dial_rewrite; every node of a shard must use
		// the same transport, so all of them do.
		"raft_transport": metadata.RaftTransportMeridian,
	}
	if len(raftRewrite) > 0 {
		cfg["raft_dial_rewrite"] = raftRewrite
	}
	return cfg
}

// raftRTT is the metadata nodes' Raft tick: the global shard's heartbeats
// and elections cross the WAN links, so the tick is at least a WAN round
// trip (elections take 10 ticks); 50ms covers `dev link latency` up to
// about 100ms one way without leadership flapping.
func (d *Dev) raftRTT() time.Duration {
	if len(d.plan.Regions) == 1 {
		return 10 * time.Millisecond
	}
	return max(50*time.Millisecond, 2*(d.cfg.WANLatency+d.cfg.Jitter)).Round(time.Millisecond)
}

// quorums are the ledger quorums (ensemble, write, ack) for n bookies in a
// region: 3/2/2 from three bookies on (one bookie may fail), else all.
func quorums(n int) (int, int, int) {
	switch {
	case n >= 3:
		return 3, 2, 2
	case n == 2:
		return 2, 2, 2
	}
	return 1, 1, 1
}

func roleOrder(role string) int {
	return slices.Index([]string{RoleMeta, RoleBookie, RoleBroker}, role)
}

func (d *Dev) addProc(role, region string, index int, node DevNodePlan, cfg map[string]any) error {
	base := filepath.Join(d.cfg.DataDir, region, fmt.Sprintf("%s-%d", role, index))
	if err := d.writeProcConfig(role, region, index, cfg); err != nil {
		return err
	}
	d.procs = append(d.procs, &devProc{
		role: role, region: region, index: index, node: node,
		p: chaos.NewProcess(chaos.ProcessSpec{
			Name:        fmt.Sprintf("%s/%s-%d", region, role, index),
			Path:        d.cfg.Binary,
			Args:        []string{role, "--config", base + ".yaml"},
			LogFile:     base + ".log",
			ReadyURL:    d.scheme() + "://" + node.HTTP + "/readyz",
			ReadyClient: d.httpClient(2 * time.Second),
		}, d.log),
	})
	return nil
}

// writeProcConfig writes the config of process role-index of region
// (with the fault-injection keys, see addFaultConfig).
func (d *Dev) writeProcConfig(role, region string, index int, cfg map[string]any) error {
	base := filepath.Join(d.cfg.DataDir, region, fmt.Sprintf("%s-%d", role, index))
	d.addFaultConfig(role, cfg)
	d.addSecurityConfig(role, region, cfg)
	if err := writeYAML(base+".yaml", cfg); err != nil {
		return fmt.Errorf("dev: %s/%s-%d config: %w", region, role, index, err)
	}
	return nil
}

// Stop stops every process (brokers first, metadata last), the proxies
// and the control server, and removes cluster.json. When ctx ends,
// processes still running are killed.
func (d *Dev) Stop(ctx context.Context) {
	d.stopOnce.Do(func() {
		_ = os.Remove(filepath.Join(d.cfg.DataDir, DevClusterFile))
		d.unregister()
		for _, role := range []string{RoleBroker, RoleBookie, RoleMeta} {
			var wg sync.WaitGroup
			for _, p := range d.procs {
				if p.role == role {
					wg.Go(func() { p.p.Stop(ctx) })
				}
			}
			wg.Wait()
		}
		d.plan.closeListeners()
		if d.control != nil {
			_ = d.control.Close()
		}
		d.net.Close()
		if d.rt != nil {
			_ = d.rt.Close()
		}
		d.log.Info("dev cluster stopped")
	})
}

// Info returns what cluster.json holds.
func (d *Dev) Info() DevClusterInfo {
	info := DevClusterInfo{ControlToken: filepath.Join(d.cfg.DataDir, DevControlTokenFile)}
	if d.ctlLis != nil {
		info.Control = d.ctlLis.Addr().String()
	}
	if d.secure() {
		info.CA, info.AdminToken = d.sec.CA, d.sec.AdminToken
	}
	for _, r := range d.plan.Regions {
		info.Regions = append(info.Regions, DevClusterRegion{Name: r.Name, GRPC: r.Brokers[0].GRPC, HTTP: r.Brokers[0].HTTP})
		for _, nodes := range [][]DevNodePlan{r.Meta, r.Brokers} {
			for _, n := range nodes {
				info.Addresses = append(info.Addresses, n.GRPC, n.HTTP)
			}
		}
	}
	// The link proxies in front of them too (a request through a link).
	for _, x := range d.plan.Proxies {
		if x.Kind == "grpc" || x.Kind == "http" {
			info.Addresses = append(info.Addresses, x.Listen)
		}
	}
	return info
}
