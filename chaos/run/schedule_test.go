//go:build unix

package run

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

var testShape = Shape{Regions: []string{"a", "b"}, Meta: 1, Bookies: 3, Brokers: 2}

func allKinds(t *testing.T) []string {
	t.Helper()
	k, err := KindsOf(Families)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestPlanSameSeedSameSchedule: a seed replays the same schedule; another
// seed gives another one.
func TestPlanSameSeedSameSchedule(t *testing.T) {
	kinds := allKinds(t)
	a, err := Plan(42, kinds, 5*time.Minute, testShape)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Plan(42, kinds, 5*time.Minute, testShape)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 42 gave two schedules:\n%v\n%v", a, b)
	}
	c, _ := Plan(43, kinds, 5*time.Minute, testShape)
	if reflect.DeepEqual(a, c) {
		t.Fatalf("seeds 42 and 43 gave the same schedule %v", a)
	}
	for _, s := range a {
		t.Logf("%s", s)
	}
}

// TestPlanCoversEveryKind: every usable kind appears at least once, even
// in a short run; every step ends within the duration and targets exist in
// the shape; kinds needing three regions are left out on two.
func TestPlanCoversEveryKind(t *testing.T) {
	kinds := allKinds(t)
	for _, d := range []time.Duration{90 * time.Second, 10 * time.Minute} {
		for seed := range int64(20) {
			steps, err := Plan(seed, kinds, d, testShape)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, s := range steps {
				seen[s.Kind] = true
				if s.At < 0 || s.For <= 0 || s.At+s.For > d {
					t.Fatalf("seed %d: step %s outside [0, %v]", seed, s, d)
				}
				for _, tg := range s.Targets {
					if !validTarget(tg, testShape) {
						t.Fatalf("seed %d: step %s: target %q not in the shape", seed, s, tg)
					}
				}
			}
			for _, k := range kinds {
				kd, _ := KindByName(k)
				if want := kd.MinRegions <= len(testShape.Regions); seen[k] != want {
					t.Fatalf("seed %d, %v: kind %s present %v, want %v", seed, d, k, seen[k], want)
				}
			}
			if !slices.IsSortedFunc(steps, func(a, b Step) int { return int(a.At - b.At) }) {
				t.Fatalf("seed %d: steps not in time order", seed)
			}
		}
	}
}

func validTarget(tg string, s Shape) bool {
	if slices.Contains(s.Regions, tg) {
		return true
	}
	reg, role, i, err := parseProc(tg)
	if err != nil || !slices.Contains(s.Regions, reg) {
		return false
	}
	n := map[string]int{"meta": s.Meta, "bookie": s.Bookies, "broker": s.Brokers}[role]
	return i >= 0 && i < n
}

// TestKindsOfRejectsUnknown: --faults names the bad entry.
func TestKindsOfRejectsUnknown(t *testing.T) {
	if _, err := KindsOf([]string{"kill", "flood"}); err == nil {
		t.Fatal("--faults flood accepted")
	}
	k, err := KindsOf([]string{"disk", "kill"})
	if err != nil || k[0] != "kill" || !slices.Contains(k, "powerloss") {
		t.Fatalf("KindsOf(disk,kill) = %v, %v", k, err)
	}
	if _, err := Plan(1, []string{"flood"}, time.Minute, testShape); err == nil {
		t.Fatal("Plan accepted an unknown kind")
	}
}

// TestScenariosTargetTheShape: every scenario's steps are catalogue kinds
// on targets of the cluster.
func TestScenariosTargetTheShape(t *testing.T) {
	for _, sc := range Scenarios() {
		steps := sc.Steps(testShape)
		if len(steps) == 0 {
			t.Fatalf("scenario %s: no steps", sc.Name)
		}
		for _, s := range steps {
			k, ok := KindByName(s.Kind)
			if !ok || !slices.Contains(sc.Families, k.Family) {
				t.Fatalf("scenario %s: step %s: kind unknown or family not declared", sc.Name, s)
			}
			for _, tg := range s.Targets {
				if !validTarget(tg, testShape) {
					t.Fatalf("scenario %s: step %s: target %q", sc.Name, s, tg)
				}
			}
		}
	}
	if _, err := ScenarioByName("nope"); err == nil {
		t.Fatal("unknown scenario accepted")
	}
}

// TestPayloadRoundTrip: payloads parse back; others do not.
func TestPayloadRoundTrip(t *testing.T) {
	p := Payload("r1", "a", "a-t0-d", 7, 100)
	if len(p) != 100 {
		t.Fatalf("payload size %d", len(p))
	}
	id, o, pr, s, ok := ParsePayload(p)
	if !ok || id != "r1" || o != "a" || pr != "a-t0-d" || s != 7 {
		t.Fatalf("parse: %v %v %v %v %v", id, o, pr, s, ok)
	}
	for _, bad := range []string{"", "chaos r1 a p", "chaos r1 a p x", "hello"} {
		if _, _, _, _, ok := ParsePayload([]byte(bad)); ok {
			t.Fatalf("%q parsed", bad)
		}
	}
}

// TestPlanDamagesOneBookiePerRegion: corrupt, truncate and wipe hit one
// bookie per region for the whole run (no entry loses two copies), and are
// left out when a region has a single bookie.
func TestPlanDamagesOneBookiePerRegion(t *testing.T) {
	kinds := allKinds(t)
	for seed := range int64(20) {
		steps, err := Plan(seed, kinds, 20*time.Minute, testShape)
		if err != nil {
			t.Fatal(err)
		}
		victim := map[string]string{}
		for _, s := range steps {
			if k, _ := KindByName(s.Kind); !k.Damages {
				continue
			}
			for _, tg := range s.Targets {
				reg, _, _, _ := parseProc(tg)
				if v, ok := victim[reg]; ok && v != tg {
					t.Fatalf("seed %d: damaging faults hit %s and %s in region %s", seed, v, tg, reg)
				}
				victim[reg] = tg
			}
		}
	}
	one := testShape
	one.Bookies = 1
	steps, _ := Plan(1, kinds, 10*time.Minute, one)
	for _, s := range steps {
		if k, _ := KindByName(s.Kind); k.Damages {
			t.Fatalf("one bookie per region: damaging step %s planned", s)
		}
	}
}

// TestOperatorFamilyNotDefault: the operator actions run only when asked
// for (a run without --faults injects what it did before them).
func TestOperatorFamilyNotDefault(t *testing.T) {
	def, err := KindsOf(DefaultFamilies)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := KindsOf([]string{FamilyOperator})
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 7 {
		t.Fatalf("operator kinds %v, want 7", ops)
	}
	for _, k := range ops {
		if slices.Contains(def, k) {
			t.Fatalf("operator kind %s is in the default families", k)
		}
	}
	sc, err := ScenarioByName("operator-actions")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ops {
		if !slices.ContainsFunc(sc.Steps(testShape), func(s Step) bool { return s.Kind == k }) {
			t.Fatalf("scenario operator-actions lacks %s", k)
		}
	}
}
