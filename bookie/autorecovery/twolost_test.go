package autorecovery_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestTwoBookiesLost: two bookies of different racks are lost for good;
// E=Qw=Qa=3 ledgers that used both get one mark naming both and both
// replaced, each entry copied from the one replica left.
func TestTwoBookiesLost(t *testing.T) {
	e := newEnv(t, 5)
	// Bookies outside rack-c, by rack: a = {0, 3}, b = {1, 4}.
	pairs := [][2]int{{0, 1}, {0, 4}, {3, 1}, {3, 4}}
	both := func(p [2]int) []int64 {
		var out []int64
		a, b := e.ledgersUsing(e.bk.ID(p[0])), e.ledgersUsing(e.bk.ID(p[1]))
		for _, x := range a {
			for _, y := range b {
				if x == y {
					out = append(out, x)
				}
			}
		}
		return out
	}
	var pair [2]int
	var shared []int64
	for attempt := 0; attempt < 20 && (len(shared) == 0 || attempt < 4); attempt++ {
		w := e.create(3, 3, 3)
		e.append(w, 30)
		if err := w.Close(e.ctx()); err != nil {
			t.Fatal(err)
		}
		for _, p := range pairs {
			if s := both(p); len(s) > len(shared) {
				pair, shared = p, s
			}
		}
	}
	if len(shared) == 0 {
		t.Fatal("no ledger uses two bookies of different racks outside rack-c")
	}
	v1, v2 := e.bk.ID(pair[0]), e.bk.ID(pair[1])
	t.Logf("losing %s and %s; ledgers using both: %v", v1, v2, shared)
	e.startAuditor("auditor", nil)
	reg := prometheus.NewRegistry()
	e.startWorker(e.workerConfig("worker", reg))
	e.bk.Kill(pair[0])
	e.bk.Kill(pair[1])
	e.waitFor("every ledger repaired", 45*time.Second, func() (bool, string) {
		ok1, d1 := e.repaired(v1)()
		ok2, d2 := e.repaired(v2)()
		return ok1 && ok2, fmt.Sprintf("%s; %s", d1, d2)
	})
	e.verifyReplicas(v1, v2)
	if got := counterValue(t, reg, "meridian_autorecovery_rereplicated_segments_total"); got < float64(2*len(shared)) {
		t.Errorf("replaced %v segment positions, want >= %d", got, 2*len(shared))
	}
}
