//go:build unix

package run

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Families of faults, the values of --faults.
const (
	FamilyKill      = "kill"
	FamilyPause     = "pause"
	FamilyRestart   = "restart"
	FamilyPartition = "partition"
	FamilyNet       = "net"
	FamilyDisk      = "disk"
	FamilyClock     = "clock"
)

// Families lists the families in catalogue order.
var Families = []string{FamilyKill, FamilyPause, FamilyRestart, FamilyPartition, FamilyNet, FamilyDisk, FamilyClock, FamilyOperator}

// DefaultFamilies are the families of a run without --faults: every one
// but the operator actions (FamilyOperator), which a run asks for by name
// (`--faults operator`, scenario operator-actions).
var DefaultFamilies = []string{FamilyKill, FamilyPause, FamilyRestart, FamilyPartition, FamilyNet, FamilyDisk, FamilyClock}

// Kind is one entry of the fault catalogue: how it picks its targets
// from a cluster's shape (seeded), how it is injected and how it is
// healed through the dev control API.
type Kind struct {
	Name        string `json:"name"`
	Family      string `json:"family"`
	Description string `json:"description"`
	// Heal says what the inverse does.
	Heal string `json:"heal"`
	// MinRegions is the fewest regions the kind needs (bridges and
	// majority partitions need three).
	MinRegions int `json:"min_regions,omitempty"`
	// Damages is set on faults that destroy a bookie's data (wipe,
	// corrupt, truncate): a schedule aims all of them at one bookie per
	// region, so no entry ever loses two copies, and needs two bookies.
	Damages bool `json:"damages,omitempty"`

	pickFn   func(rng *rand.Rand, s Shape) ([]string, string)
	injectFn func(ctx context.Context, c *cluster, st Step) (string, error)
	healFn   func(ctx context.Context, c *cluster, st Step) error
}

func (k Kind) pick(rng *rand.Rand, s Shape) ([]string, string) { return k.pickFn(rng, s) }

// Catalogue returns every fault kind.
func Catalogue() []Kind { return slices.Clone(catalogue) }

// KindByName returns the kind called name.
func KindByName(name string) (Kind, bool) {
	for _, k := range catalogue {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// KindsOf returns the names of the kinds of the given families (a kind
// name is accepted too), in catalogue order. An unknown name is an error
// naming it.
func KindsOf(families []string) ([]string, error) {
	var out []string
	for _, f := range families {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		found := false
		for _, k := range catalogue {
			if (k.Family == f || k.Name == f) && !slices.Contains(out, k.Name) {
				out = append(out, k.Name)
				found = true
			} else if k.Family == f || k.Name == f {
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("--faults: %q is neither a family (%s) nor a fault kind (meridian chaos list)", f, strings.Join(Families, ","))
		}
	}
	// Catalogue order, whatever the order of the flag.
	slices.SortStableFunc(out, func(a, b string) int { return kindIndex(a) - kindIndex(b) })
	return out, nil
}

func kindIndex(name string) int {
	return slices.IndexFunc(catalogue, func(k Kind) bool { return k.Name == name })
}

// Endpoints: "<region>/<role>-<index>".
func procName(region, role string, i int) string { return fmt.Sprintf("%s/%s-%d", region, role, i) }

// parseProc splits a process endpoint.
func parseProc(name string) (region, role string, index int, err error) {
	reg, rest, ok := strings.Cut(name, "/")
	i := strings.LastIndexByte(rest, '-')
	if !ok || i < 0 {
		return "", "", 0, fmt.Errorf("target %q: want region/role-index", name)
	}
	if _, err := fmt.Sscanf(rest[i+1:], "%d", &index); err != nil {
		return "", "", 0, fmt.Errorf("target %q: index: %w", name, err)
	}
	return reg, rest[:i], index, nil
}

func pickRegion(rng *rand.Rand, s Shape) string { return s.Regions[rng.IntN(len(s.Regions))] }

func pickProc(rng *rand.Rand, s Shape, roles ...string) string {
	role := roles[rng.IntN(len(roles))]
	n := map[string]int{"meta": s.Meta, "bookie": s.Bookies, "broker": s.Brokers}[role]
	return procName(pickRegion(rng, s), role, rng.IntN(n))
}

// pickLink picks a link for a network fault: a WAN link between two
// regions, or (half of the time) a broker-bookie link inside a region.
func pickLink(rng *rand.Rand, s Shape) []string {
	if len(s.Regions) > 1 && rng.IntN(2) == 0 {
		i := rng.IntN(len(s.Regions))
		j := (i + 1 + rng.IntN(len(s.Regions)-1)) % len(s.Regions)
		return []string{s.Regions[i], s.Regions[j]}
	}
	r := pickRegion(rng, s)
	return []string{procName(r, "broker", rng.IntN(s.Brokers)), procName(r, "bookie", rng.IntN(s.Bookies))}
}

func pickOtherRegion(rng *rand.Rand, s Shape, not string) string {
	var others []string
	for _, r := range s.Regions {
		if r != not {
			others = append(others, r)
		}
	}
	return others[rng.IntN(len(others))]
}

// catalogue is every fault kind: the process, network, disk and clock
// faults, then the operator actions (operator.go).
var catalogue = append(baseKinds, operatorKinds...)

var baseKinds = []Kind{
	{
		Name: "kill", Family: FamilyKill, Description: "kill -9 one process (meta, bookie or broker)", Heal: "start it again with its data",
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) {
			return []string{pickProc(rng, s, "broker", "broker", "bookie", "bookie", "meta")}, ""
		},
		injectFn: func(ctx context.Context, c *cluster, st Step) (string, error) {
			return "SIGKILL", c.signalAll(ctx, st.Targets, "KILL")
		},
		healFn: func(ctx context.Context, c *cluster, st Step) error { return c.startAll(ctx, st.Targets) },
	},
	{
		Name: "kill-region", Family: FamilyKill, Description: "kill -9 every process of one region at once", Heal: "start meta, bookies, then brokers again",
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) { return []string{pickRegion(rng, s)}, "" },
		injectFn: func(ctx context.Context, c *cluster, st Step) (string, error) {
			return "SIGKILL all", c.signalAll(ctx, c.regionProcs(st.Targets[0]), "KILL")
		},
		healFn: func(ctx context.Context, c *cluster, st Step) error {
			return c.startAll(ctx, c.regionProcs(st.Targets[0]))
		},
	},
	{
		Name: "pause", Family: FamilyPause, Description: "SIGSTOP one process (a broker past its session: a zombie owner)", Heal: "SIGCONT",
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) {
			return []string{pickProc(rng, s, "broker", "broker", "bookie", "meta")}, ""
		},
		injectFn: func(ctx context.Context, c *cluster, st Step) (string, error) {
			return "SIGSTOP", c.signalAll(ctx, st.Targets, "STOP")
		},
		healFn: func(ctx context.Context, c *cluster, st Step) error { return c.signalAll(ctx, st.Targets, "CONT") },
	},
	{
		Name: "restart", Family: FamilyRestart, Description: "graceful stop (SIGTERM) of one process", Heal: "start it again",
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) {
			return []string{pickProc(rng, s, "broker", "bookie", "meta")}, ""
		},
		injectFn: func(ctx context.Context, c *cluster, st Step) (string, error) {
			return "SIGTERM", c.stopAll(ctx, st.Targets)
		},
		healFn: func(ctx context.Context, c *cluster, st Step) error { return c.startAll(ctx, st.Targets) },
	},
	{
		Name: "isolate-region", Family: FamilyPartition, MinRegions: 2, Description: "cut every WAN link of one region, both ways", Heal: "heal its links",
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) { return []string{pickRegion(rng, s)}, "" },
		injectFn: func(ctx context.Context, c *cluster, st Step) (string, error) {
			return "cut both ways", c.eachOther(st.Targets[0], func(o string) error {
				return c.link(ctx, linkReq{Op: "cut", A: st.Targets[0], B: o})
			})
		},
		healFn: func(ctx context.Context, c *cluster, st Step) error {
			return c.eachOther(st.Targets[0], func(o string) error { return c.link(ctx, linkReq{Op: "heal", A: st.Targets[0], B: o}) })
		},
	},
	{
		Name: "cut-oneway", Family: FamilyPartition, MinRegions: 2, Description: "cut one direction of a WAN link (A→B)", Heal: "heal the link",
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) {
			a := pickRegion(rng, s)
			return []string{a, pickOtherRegion(rng, s, a)}, ""
		},
		injectFn: func(ctx context.Context, c *cluster, st Step) (string, error) {
			return "one way", c.link(ctx, linkReq{Op: "cut", A: st.Targets[0], B: st.Targets[1], Oneway: true})
		},
		healFn: func(ctx context.Context, c *cluster, st Step) error {
			return c.link(ctx, linkReq{Op: "heal", A: st.Targets[0], B: st.Targets[1]})
		},
	},
	{
		Name: "isolate-process", Family: FamilyPartition, Description: "partition one broker or bookie from the rest of its region", Heal: "heal-all",
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) {
			return []string{pickProc(rng, s, "broker", "bookie")}, ""
		},
		injectFn: func(ctx context.Context, c *cluster, st Step) (string, error) {
			reg, _, _, err := parseProc(st.Targets[0])
			if err != nil {
				return "", err
			}
			var rest []string
			for _, p := range c.regionProcs(reg) {
				if p != st.Targets[0] {
					rest = append(rest, p)
				}
			}
			return "partition", c.link(ctx, linkReq{Op: "partition", Groups: [][]string{{st.Targets[0]}, rest}})
		},
		healFn: func(ctx context.Context, c *cluster, _ Step) error { return c.link(ctx, linkReq{Op: "heal-all"}) },
	},
	{
		Name: "partition-majority", Family: FamilyPartition, MinRegions: 3, Description: "split the regions into a minority (one region) and a majority", Heal: "heal-all",
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) { return []string{pickRegion(rng, s)}, "" },
		injectFn: func(ctx context.Context, c *cluster, st Step) (string, error) {
			var rest []string
			for _, r := range c.shape.Regions {
				if r != st.Targets[0] {
					rest = append(rest, r)
				}
			}
			return "minority " + st.Targets[0], c.link(ctx, linkReq{Op: "partition", Groups: [][]string{{st.Targets[0]}, rest}})
		},
		healFn: func(ctx context.Context, c *cluster, _ Step) error { return c.link(ctx, linkReq{Op: "heal-all"}) },
	},
	{
		Name: "bridge", Family: FamilyPartition, MinRegions: 3, Description: "cut A from B both ways; every other region still reaches both (a bridge)", Heal: "heal the link",
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) {
			a := pickRegion(rng, s)
			return []string{a, pickOtherRegion(rng, s, a)}, ""
		},
		injectFn: func(ctx context.Context, c *cluster, st Step) (string, error) {
			return "cut both ways", c.link(ctx, linkReq{Op: "cut", A: st.Targets[0], B: st.Targets[1]})
		},
		healFn: func(ctx context.Context, c *cluster, st Step) error {
			return c.link(ctx, linkReq{Op: "heal", A: st.Targets[0], B: st.Targets[1]})
		},
	},
	{
		Name: "latency", Family: FamilyNet, Description: "added latency and jitter on a WAN link or a broker-bookie link, both ways", Heal: "restore the link's latency",
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) {
			return pickLink(rng, s), fmt.Sprintf("%dms/%dms", 50+rng.IntN(200), 10+rng.IntN(40))
		},
		injectFn: func(ctx context.Context, c *cluster, st Step) (string, error) {
			lat, jit, _ := strings.Cut(st.Param, "/")
			return "latency " + lat + " jitter " + jit, c.link(ctx, linkReq{Op: "latency", A: st.Targets[0], B: st.Targets[1], Latency: lat, Jitter: jit})
		},
		healFn: func(ctx context.Context, c *cluster, st Step) error {
			lat, jit := c.baseLatency(st.Targets[0], st.Targets[1])
			return c.link(ctx, linkReq{Op: "latency", A: st.Targets[0], B: st.Targets[1], Latency: lat.String(), Jitter: jit.String()})
		},
	},
	{
		Name: "bandwidth", Family: FamilyNet, Description: "bandwidth limit on a link, both ways", Heal: "remove the shape",
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) {
			return pickLink(rng, s), fmt.Sprintf("%dKB", 64<<rng.IntN(4))
		},
		injectFn: func(ctx context.Context, c *cluster, st Step) (string, error) {
			return "bandwidth " + st.Param, c.link(ctx, linkReq{Op: "shape", A: st.Targets[0], B: st.Targets[1], Bandwidth: st.Param})
		},
		healFn: healShape,
	},
	{
		Name: "drop", Family: FamilyNet, Description: "packet drop on a link (a dropped chunk costs a retransmission delay), both ways", Heal: "remove the shape",
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) {
			return pickLink(rng, s), fmt.Sprintf("%.2f", 0.05+0.05*float64(rng.IntN(5)))
		},
		injectFn: func(ctx context.Context, c *cluster, st Step) (string, error) {
			var p float64
			if _, err := fmt.Sscanf(st.Param, "%g", &p); err != nil {
				return "", fmt.Errorf("drop %q: %w", st.Param, err)
			}
			return "drop " + st.Param, c.link(ctx, linkReq{Op: "shape", A: st.Targets[0], B: st.Targets[1], Drop: p})
		},
		healFn: healShape,
	},
	{
		Name: "slow-close", Family: FamilyNet, Description: "a close takes a while to reach the other side of a link", Heal: "remove the shape",
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) {
			return pickLink(rng, s), fmt.Sprintf("%ds", 1+rng.IntN(3))
		},
		injectFn: func(ctx context.Context, c *cluster, st Step) (string, error) {
			return "slow close " + st.Param, c.link(ctx, linkReq{Op: "shape", A: st.Targets[0], B: st.Targets[1], SlowClose: st.Param})
		},
		healFn: healShape,
	},
	diskKind("disk-fail-sync", "fsync of one bookie's journal fails", func(*rand.Rand) string { return "fail sync journal" }, restartAfter),
	diskKind("disk-full", "one bookie's disk is full", func(*rand.Rand) string { return "full on" }, restartAfter),
	diskKind("disk-usage-high", "one bookie's disk reports 97% used (over its read-only threshold)", func(*rand.Rand) string { return "usage 0.97" }, clearOnly),
	diskKind("disk-slow-sync", "fsync of one bookie's journal is slow", func(rng *rand.Rand) string {
		return fmt.Sprintf("slow sync journal %dms", 50+50*rng.IntN(4))
	}, clearOnly),
	diskKind("disk-corrupt", "flip a bit in one bookie's newest journal file or its index checkpoint", func(rng *rand.Rand) string {
		return "corrupt " + []string{".log", "checkpoint"}[rng.IntN(2)]
	}, damage),
	diskKind("disk-truncate", "cut the tail of one bookie's newest journal file or its index checkpoint", func(rng *rand.Rand) string {
		return fmt.Sprintf("truncate %s %d", []string{".log", "checkpoint"}[rng.IntN(2)], 16+rng.IntN(512))
	}, damage),
	{
		Name: "powerloss", Family: FamilyDisk, Description: "one bookie loses every byte written since its last fsync and dies", Heal: "start it again",
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) {
			return []string{pickProc(rng, s, "bookie")}, "powerloss"
		},
		injectFn: func(ctx context.Context, c *cluster, st Step) (string, error) {
			if err := forAll(st.Targets, func(b string) error { return c.diskOn(ctx, b, "powerloss") }); err != nil {
				return "", err
			}
			return "powerloss", forAll(st.Targets, func(b string) error { return c.waitExited(ctx, b) })
		},
		healFn: func(ctx context.Context, c *cluster, st Step) error { return c.startAll(ctx, st.Targets) },
	},
	{
		Name: "wipe-bookie", Family: FamilyDisk, Damages: true, Description: "kill -9 one bookie and delete its data", Heal: "start it as a new, empty bookie (re-replication refills it)",
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) { return []string{pickProc(rng, s, "bookie")}, "" },
		injectFn: func(ctx context.Context, c *cluster, st Step) (string, error) {
			if err := c.signalAll(ctx, st.Targets, "KILL"); err != nil {
				return "", err
			}
			return "SIGKILL, wipe", forAll(st.Targets, func(b string) error { return c.process(ctx, "wipe", b, "") })
		},
		healFn: func(ctx context.Context, c *cluster, st Step) error { return c.startAll(ctx, st.Targets) },
	},
	{
		Name: "clock-skew", Family: FamilyClock, Description: "skew one metadata node's clock forward or back", Heal: "skew 0",
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) {
			sign := []string{"+", "-"}[rng.IntN(2)]
			return []string{pickProc(rng, s, "meta")}, fmt.Sprintf("%s%ds", sign, 2+rng.IntN(9))
		},
		injectFn: func(ctx context.Context, c *cluster, st Step) (string, error) {
			return "skew " + st.Param, forAll(st.Targets, func(m string) error { return c.clock(ctx, m, st.Param) })
		},
		healFn: func(ctx context.Context, c *cluster, st Step) error {
			return forAll(st.Targets, func(m string) error { return c.clock(ctx, m, "0") })
		},
	},
}

func healShape(ctx context.Context, c *cluster, st Step) error {
	return c.link(ctx, linkReq{Op: "shape", A: st.Targets[0], B: st.Targets[1], Bandwidth: "0", SlowClose: "0s"})
}

// How a disk fault heals.
const (
	// clearOnly disarms the fault.
	clearOnly = iota
	// restartAfter disarms it and restarts the bookie (kill -9, start): a
	// bookie that saw an fsync error or a full disk turns read-only and
	// stays so until restarted (it cannot trust its page cache after a
	// failed fsync).
	restartAfter
	// damage is restartAfter for a fault that damaged a file: the replay
	// of the restart meets the damage, which the bookie must detect by
	// checksum and never serve. Aimed at one bookie per region (Damages).
	damage
)

// diskKind is a disk fault of one bookie (or several: a scenario).
func diskKind(name, desc string, cmd func(*rand.Rand) string, heal int) Kind {
	healDesc := map[int]string{
		clearOnly:    "clear the fault",
		restartAfter: "clear, kill -9 and start the bookie (it stays read-only after the error until restarted)",
		damage:       "clear, kill -9 and start the bookie (replay meets the damage)",
	}[heal]
	restart := heal != clearOnly
	return Kind{
		Name: name, Family: FamilyDisk, Description: desc, Heal: healDesc, Damages: heal == damage,
		pickFn: func(rng *rand.Rand, s Shape) ([]string, string) {
			return []string{pickProc(rng, s, "bookie")}, cmd(rng)
		},
		injectFn: func(ctx context.Context, c *cluster, st Step) (string, error) {
			detail := st.Param
			err := forAll(st.Targets, func(b string) error {
				err := c.diskOn(ctx, b, st.Param)
				if err != nil && strings.Contains(st.Param, "checkpoint") && strings.Contains(err.Error(), "no non-empty file matching") {
					// The bookie has not written (or opened) its index
					// checkpoint since it started: hit its journal instead.
					alt := strings.Replace(st.Param, "checkpoint", ".log", 1)
					detail = alt + " (no checkpoint yet)"
					err = c.diskOn(ctx, b, alt)
				}
				return err
			})
			return detail, err
		},
		healFn: func(ctx context.Context, c *cluster, st Step) error {
			err := forAll(st.Targets, func(b string) error { return c.diskOn(ctx, b, "clear") })
			if !restart {
				return err
			}
			if err := c.signalAll(ctx, st.Targets, "KILL"); err != nil {
				return err
			}
			if heal != damage {
				return c.startAll(ctx, st.Targets)
			}
			return forAll(st.Targets, func(b string) error {
				err := c.startOnce(ctx, b)
				if err == nil || !strings.Contains(err.Error(), "refusing to start") {
					return err
				}
				// A bookie whose index checkpoint is damaged refuses to
				// start ("restore it or wipe the bookie"): the operator's
				// remedy is a wipe; its ledgers are re-replicated.
				c.note("%s refused to start after %q (%v): wiped and started empty", b, st.Param, err)
				if err := c.process(ctx, "wipe", b, ""); err != nil {
					return err
				}
				return c.startAll(ctx, []string{b})
			})
		},
	}
}

// faultTimeout bounds one inject or heal (a start waits for readiness).
const faultTimeout = 3 * time.Minute
