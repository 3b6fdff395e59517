//go:build unix

package run

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Scenario is a named, fixed schedule.
type Scenario struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Families are the fault families it uses (a cluster without fault
	// injection cannot run disk or clock scenarios).
	Families []string `json:"families"`
	steps    func(s Shape) []Step
}

// Steps returns the scenario's schedule on a cluster of shape s.
func (sc Scenario) Steps(s Shape) []Step { return sc.steps(s) }

// Duration is when the scenario's last fault ends.
func (sc Scenario) Duration(s Shape) time.Duration {
	var d time.Duration
	for _, st := range sc.steps(s) {
		d = max(d, st.At+st.For)
	}
	return d
}

func first(s Shape) string { return s.Regions[0] }

func second(s Shape) string { return s.Regions[min(1, len(s.Regions)-1)] }

var scenarios = []Scenario{
	{
		Name: "zombie-owner", Families: []string{FamilyPause},
		Description: "pause (SIGSTOP) a broker of a region past its metadata session, then resume: its topics move, the resumed owner is fenced and no acknowledgement of theirs is lost",
		steps: func(s Shape) []Step {
			var t []string
			for i := range s.Brokers {
				t = append(t, procName(first(s), "broker", i))
			}
			return []Step{{At: 5 * time.Second, Kind: "pause", Targets: t[:1], For: 25 * time.Second}}
		},
	},
	{
		Name: "wiped-bookie", Families: []string{FamilyDisk},
		Description: "kill -9 a bookie, delete its data and start it empty: its ledgers are re-replicated, nothing acknowledged is lost",
		steps: func(s Shape) []Step {
			return []Step{{At: 5 * time.Second, Kind: "wipe-bookie", Targets: []string{procName(first(s), "bookie", 0)}, For: 10 * time.Second}}
		},
	},
	{
		Name: "region-partition", Families: []string{FamilyPartition},
		Description: "isolate one region (every WAN link cut both ways): writes go on in every region; after the heal the regions converge",
		steps: func(s Shape) []Step {
			return []Step{{At: 5 * time.Second, Kind: "isolate-region", Targets: []string{first(s)}, For: 25 * time.Second}}
		},
	},
	{
		Name: "remote-rejects", Families: []string{FamilyDisk},
		Description: "every bookie of a remote region has a full disk: it refuses replicated (and local) writes for a while, then recovers; replication resumes without loss or duplicate storage",
		steps: func(s Shape) []Step {
			var t []string
			for i := range s.Bookies {
				t = append(t, procName(second(s), "bookie", i))
			}
			return []Step{{At: 5 * time.Second, Kind: "disk-full", Targets: t, For: 20 * time.Second, Param: "full on"}}
		},
	},
	{
		Name: "ack-holes-crash", Families: []string{FamilyKill},
		Description: "consumers acknowledge individually, out of order (holes), on replicated subscriptions; the topic owner broker is killed -9 twice: the holes survive, acknowledged messages are not lost",
		steps: func(s Shape) []Step {
			b := procName(first(s), "broker", 0)
			return []Step{
				{At: 5 * time.Second, Kind: "kill", Targets: []string{b}, For: 8 * time.Second},
				{At: 20 * time.Second, Kind: "kill", Targets: []string{procName(first(s), "broker", min(1, s.Brokers-1))}, For: 8 * time.Second},
			}
		},
	},
	{
		Name: "power-loss", Families: []string{FamilyDisk},
		Description: "one bookie of the ensemble loses its unsynced writes and dies; an acknowledged entry must survive on the other copies",
		steps: func(s Shape) []Step {
			return []Step{{At: 5 * time.Second, Kind: "powerloss", Targets: []string{procName(first(s), "bookie", 0)}, For: 10 * time.Second, Param: "powerloss"}}
		},
	},
	{
		Name: "power-loss-quorum", Families: []string{FamilyDisk, FamilyKill},
		Description: "every bookie of a region loses its unsynced writes at once (a power cut of the rack) and the region's brokers are killed -9: with correct fsync nothing acknowledged is lost; the broken-build test runs it with unsafe_ack_before_sync",
		steps: func(s Shape) []Step {
			var t []string
			for i := range s.Bookies {
				t = append(t, procName(first(s), "bookie", i))
			}
			var b []string
			for i := range s.Brokers {
				b = append(b, procName(first(s), "broker", i))
			}
			// The region's brokers die too (their caches would still serve
			// the lost entries) and come back after the bookies.
			return []Step{{At: 8 * time.Second, Kind: "powerloss", Targets: t, For: 10 * time.Second, Param: "powerloss"},
				{At: 9 * time.Second, Kind: "kill", Targets: b, For: 12 * time.Second}}
		},
	},
	{
		Name: "clock-jump", Families: []string{FamilyClock},
		Description: "skew every metadata node's clock 8s forward, then 8s back",
		steps: func(s Shape) []Step {
			var t []string
			for _, r := range s.Regions {
				t = append(t, procName(r, "meta", 0))
			}
			return []Step{{At: 5 * time.Second, Kind: "clock-skew", Targets: t, For: 10 * time.Second, Param: "+8s"},
				{At: 20 * time.Second, Kind: "clock-skew", Targets: t, For: 10 * time.Second, Param: "-8s"}}
		},
	},
	{
		Name: "operator-actions", Families: []string{FamilyOperator},
		Description: "operator actions as faults (issue 20): a topic deleted --force and re-created in one region, an unload, a replicated subscription created at earliest in one region and at latest in the other while it is cut off, a reset to latest during a partition, a controlled failover switch of a replicated subscription's consumer, a topic-level set-replication, a region removed from replication and added again; everything acknowledged after each action must reach every region and every replicated subscription (completeness)",
		steps: func(s Shape) []Step {
			a, b := first(s), second(s)
			return []Step{
				{At: 5 * time.Second, Kind: "topic-recreate", Targets: []string{a}, For: 5 * time.Second, Param: "t0"},
				{At: 12 * time.Second, Kind: "unload", Targets: []string{b}, For: 2 * time.Second, Param: "t1"},
				{At: 16 * time.Second, Kind: "repsub-partitioned", Targets: []string{b, a}, For: 15 * time.Second, Param: "t1"},
				{At: 34 * time.Second, Kind: "seek-partitioned", Targets: []string{a}, For: 8 * time.Second, Param: "t1 latest"},
				{At: 45 * time.Second, Kind: "failover-switch", Targets: []string{a, b}, For: 12 * time.Second, Param: "t1"},
				{At: 60 * time.Second, Kind: "topic-replication", Targets: []string{a}, For: 5 * time.Second, Param: "t0"},
				{At: 68 * time.Second, Kind: "region-readd", Targets: []string{b}, For: 10 * time.Second},
			}
		},
	},
}

// Scenarios returns the named scenarios.
func Scenarios() []Scenario { return slices.Clone(scenarios) }

// ScenarioByName returns the scenario called name, or an error listing
// them.
func ScenarioByName(name string) (Scenario, error) {
	var names []string
	for _, sc := range scenarios {
		if sc.Name == name {
			return sc, nil
		}
		names = append(names, sc.Name)
	}
	return Scenario{}, fmt.Errorf("--scenario %q: not one of %s", name, strings.Join(names, ", "))
}
