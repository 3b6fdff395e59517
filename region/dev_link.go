//go:build unix

package region

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meridianmq/meridian/chaos"
)

// Process links of a dev cluster: every connection a process of region R
// opens to another process of R goes through a proxy of its own (source
// process, target process), so that one broker can be cut from one
// bookie. The processes dial through them by their config's dial_rewrite
// (target address → proxy address):
//
//   - a broker dials its region's metadata node, bookies and other
//     brokers (gRPC);
//   - a bookie dials its region's metadata node and other bookies
//     (autorecovery copies, gRPC).
//
// A metadata node dials only Raft peers, and a region has one metadata
// node in dev: its Raft traffic crosses the region links only. Gossip
// stays out of it: dev runs no LAN gossip, and the brokers' WAN gossip
// crosses the region links.

// Limits of the link control.
const (
	maxDevBandwidth = 1 << 40 // bytes per second
)

// DevProcessName is a process endpoint's name: "<region>/<role>-<index>".
func DevProcessName(region, role string, index int) string {
	return fmt.Sprintf("%s/%s-%d", region, role, index)
}

// planProcessProxies adds the process links of every region to p, with
// listen addresses from addr.
func planProcessProxies(p *DevPlan, addr func() string) {
	for _, r := range p.Regions {
		type target struct {
			name string
			node DevNodePlan
		}
		var metas, bookies, brokers []target
		for i, n := range r.Meta {
			metas = append(metas, target{DevProcessName(r.Name, RoleMeta, i), n})
		}
		for i, n := range r.Bookies {
			bookies = append(bookies, target{DevProcessName(r.Name, RoleBookie, i), n})
		}
		for i, n := range r.Brokers {
			brokers = append(brokers, target{DevProcessName(r.Name, RoleBroker, i), n})
		}
		link := func(from string, to []target) {
			for _, t := range to {
				if t.name != from {
					p.Proxies = append(p.Proxies, DevProxyPlan{From: from, To: t.name, Kind: "grpc", Target: t.node.GRPC, Listen: addr()})
				}
			}
		}
		for _, b := range brokers {
			link(b.name, slices.Concat(metas, bookies, brokers))
		}
		for _, b := range bookies {
			link(b.name, slices.Concat(metas, bookies))
		}
	}
}

// hasProcessProxies reports whether p has process links (plans recorded
// before they existed have none).
func hasProcessProxies(p *DevPlan) bool {
	return slices.ContainsFunc(p.Proxies, func(x DevProxyPlan) bool { return strings.Contains(x.From, "/") })
}

// processRewrite is the dial_rewrite of process from: its process links.
func (d *Dev) processRewrite(from string) map[string]string {
	m := map[string]string{}
	for _, x := range d.plan.Proxies {
		if x.From == from {
			m[x.Target] = x.Listen
		}
	}
	return m
}

// mergeRewrite returns a copy of a with b's entries added.
func mergeRewrite(a, b map[string]string) map[string]string {
	m := maps.Clone(a)
	if m == nil {
		m = map[string]string{}
	}
	maps.Copy(m, b)
	return m
}

// devEndpoint is a region (proc "") or a process of region.
type devEndpoint struct {
	name, region string
	proc         bool
}

// endpoint parses an endpoint name given in field.
func (d *Dev) endpoint(field, s string) (devEndpoint, error) {
	reg, proc, ok := strings.Cut(s, "/")
	if err := d.checkRegion(field, reg); err != nil {
		if ok {
			return devEndpoint{}, fmt.Errorf("%s: %q: want a region or <region>/<role>-<index> (e.g. a/broker-0): %w", field, s, err)
		}
		return devEndpoint{}, err
	}
	if !ok {
		return devEndpoint{name: s, region: s}, nil
	}
	role, idx, ok := strings.Cut(proc, "-")
	i, err := strconv.Atoi(idx)
	if !ok || err != nil || i < 0 {
		return devEndpoint{}, fmt.Errorf("%s: %q: want <region>/<role>-<index> (e.g. %s/broker-0)", field, s, reg)
	}
	if _, err := d.findProc(role, reg, i); err != nil {
		return devEndpoint{}, fmt.Errorf("%s: %q: %w", field, s, err)
	}
	return devEndpoint{name: s, region: reg, proc: true}, nil
}

// hasProxy reports whether a proxy carries traffic between a and b (in
// either direction: a proxy carries both).
func (d *Dev) hasProxy(a, b string) bool {
	return slices.ContainsFunc(d.plan.Proxies, func(x DevProxyPlan) bool {
		return (x.From == a && x.To == b) || (x.From == b && x.To == a)
	})
}

// linkPair checks that A and B of req name the two ends of a link.
func (d *Dev) linkPair(req DevLinkRequest) (devEndpoint, devEndpoint, error) {
	a, errA := d.endpoint("a", req.A)
	b, errB := d.endpoint("b", req.B)
	if err := errors.Join(errA, errB); err != nil {
		return a, b, err
	}
	switch {
	case a.name == b.name:
		return a, b, fmt.Errorf("b: %q is a itself; a link joins two endpoints", req.B)
	case a.proc != b.proc:
		return a, b, fmt.Errorf("b: %q and a %q: a link joins two regions or two processes of one region", req.B, req.A)
	case a.proc && a.region != b.region:
		return a, b, fmt.Errorf("b: %q is not in region %s of a %q: processes of different regions talk over the region link %s-%s", req.B, a.region, req.A, a.region, b.region)
	case a.proc && !d.hasProxy(a.name, b.name):
		return a, b, fmt.Errorf("b: no process link between %s and %s: brokers dial the metadata node, bookies and brokers of their region, bookies the metadata node and bookies", req.A, req.B)
	}
	return a, b, nil
}

// Link applies a link request.
func (d *Dev) Link(req DevLinkRequest) error {
	switch req.Op {
	case "heal-all":
		d.net.HealAll()
		return nil
	case "partition":
		return d.partition(req.Groups)
	case "cut", "heal", "latency", "shape":
	default:
		return fmt.Errorf("op: %q is not cut, heal, latency, shape, partition or heal-all", req.Op)
	}
	if _, _, err := d.linkPair(req); err != nil {
		return err
	}
	switch req.Op {
	case "cut":
		d.net.Cut(req.A, req.B, req.Oneway)
	case "heal":
		d.net.Heal(req.A, req.B)
	case "latency":
		lat, err := parseDevDuration("latency", req.Latency)
		if err != nil {
			return err
		}
		jit := time.Duration(0)
		if req.Jitter != "" {
			if jit, err = parseDevDuration("jitter", req.Jitter); err != nil {
				return err
			}
		}
		return d.net.SetLatency(req.A, req.B, lat, jit)
	case "shape":
		s, err := parseDevShape(req)
		if err != nil {
			return err
		}
		return d.net.SetShape(req.A, req.B, s, req.Oneway)
	}
	return nil
}

func parseDevShape(req DevLinkRequest) (chaos.Shape, error) {
	var s chaos.Shape
	var err error
	if req.Bandwidth != "" {
		if s.Bandwidth, err = ParseBandwidth(req.Bandwidth); err != nil {
			return s, fmt.Errorf("bandwidth: %w", err)
		}
	}
	if !(req.Drop >= 0 && req.Drop <= 1) {
		return s, fmt.Errorf("drop: %v must be in [0, 1]", req.Drop)
	}
	s.Drop = req.Drop
	if req.SlowClose != "" {
		if s.SlowClose, err = parseDevDuration("slow_close", req.SlowClose); err != nil {
			return s, err
		}
	}
	return s, s.Validate()
}

// ParseBandwidth parses a rate in bytes per second: a number with an
// optional unit B, KB (1000), MB, GB, KiB (1024), MiB or GiB ("1MB",
// "512KiB", "0" for no limit).
func ParseBandwidth(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	num, mult := strings.TrimSpace(s), 1.0
	for _, u := range units {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || v*mult > maxDevBandwidth {
		return 0, fmt.Errorf("%q is not a rate in [0, %d] bytes/s like 1MB, 512KiB or 0 (no limit)", s, int64(maxDevBandwidth))
	}
	return int64(v * mult), nil
}

// partition cuts, both ways, every link between endpoints of different
// groups. A region stands for its region links, a process for its process
// links; the members of all groups are regions, or processes of one
// region. A single group is partitioned from every other endpoint of its
// kind (the other regions, or the other processes of its region).
// Endpoints in no group keep their links.
func (d *Dev) partition(groups [][]string) error {
	if len(groups) == 0 {
		return errors.New("groups: empty: want at least one group of endpoints")
	}
	var first *devEndpoint
	seen := map[string]bool{}
	for gi, g := range groups {
		if len(g) == 0 {
			return fmt.Errorf("groups[%d]: empty", gi)
		}
		for mi, m := range g {
			field := fmt.Sprintf("groups[%d][%d]", gi, mi)
			e, err := d.endpoint(field, m)
			if err != nil {
				return err
			}
			if seen[m] {
				return fmt.Errorf("%s: %q is in two groups", field, m)
			}
			seen[m] = true
			if first == nil {
				first = &e
			} else if e.proc != first.proc || (e.proc && e.region != first.region) {
				return fmt.Errorf("%s: %q: a partition's members are all regions or all processes of one region (groups[0][0] is %q)", field, m, first.name)
			}
		}
	}
	if len(groups) == 1 {
		var rest []string
		if first.proc {
			for _, p := range d.procs {
				if n := DevProcessName(p.region, p.role, p.index); p.region == first.region && !seen[n] {
					rest = append(rest, n)
				}
			}
		} else {
			rest = slices.DeleteFunc(d.regionNames(), func(r string) bool { return seen[r] })
		}
		if len(rest) == 0 {
			return errors.New("groups: a single group holding every endpoint partitions nothing")
		}
		groups = [][]string{groups[0], rest}
	}
	n := 0
	for gi, g := range groups {
		for _, h := range groups[gi+1:] {
			for _, a := range g {
				for _, b := range h {
					if !first.proc || d.hasProxy(a, b) {
						d.net.Cut(a, b, false)
						n++
					}
				}
			}
		}
	}
	d.log.Info("partition", "groups", groups, "links_cut", n)
	return nil
}

// linkStatus lists the region links (all of them) and the process links
// that are not in their default state (cut, shaped or delayed).
func (d *Dev) linkStatus() []DevLinkStatus {
	var out []DevLinkStatus
	for _, l := range d.net.Links() {
		if strings.Contains(l.From, "/") && l.IsDefault() {
			continue
		}
		s := DevLinkStatus{From: l.From, To: l.To, Latency: l.Latency.String(), Jitter: l.Jitter.String(), Cut: l.Cut, Bandwidth: l.Bandwidth, Drop: l.Drop}
		if l.SlowClose > 0 {
			s.SlowClose = l.SlowClose.String()
		}
		out = append(out, s)
	}
	return out
}
