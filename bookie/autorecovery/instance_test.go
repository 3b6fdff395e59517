package autorecovery_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/metadata"
)

// TestLimboWithoutSpareReplicatesOntoNewInstance: with exactly E bookies, a
// re-formatted bookie has no spare to hand its replicas to. Autorecovery
// copies each of its write sets' entries from the other replicas onto the
// bookie's new instance and records that instance in the ensemble; then no
// ledger below the limbo bound lists the old instance and the limbo ends.
// Every entry is then on every replica of its write set.
func TestLimboWithoutSpareReplicatesOntoNewInstance(t *testing.T) {
	e := newEnv(t, 3)
	for range 2 {
		w := e.create(3, 2, 2)
		e.append(w, 30)
		if err := w.Close(e.ctx()); err != nil {
			t.Fatal(err)
		}
	}
	victim := e.bk.ID(1)
	old := e.bk.Server(1).InstanceID()
	e.bk.Wipe(1)
	ck, err := e.bk.Format(1)
	if err != nil {
		t.Fatal(err)
	}
	if ck.LimboBelowLedger == 0 || ck.InstanceID == old {
		t.Fatalf("format: %+v, want a new instance in limbo", ck)
	}
	if err := e.bk.Restart(1); err != nil {
		t.Fatal(err)
	}
	if !e.bk.Server(1).InLimbo() {
		t.Fatal("re-formatted bookie not in limbo")
	}
	e.startAuditor("auditor-0", nil)
	e.startWorker(e.workerConfig("worker-0", nil))
	e.waitFor("the re-formatted bookie's replicas rebuilt on its new instance and its limbo ended", 120*time.Second, func() (bool, string) {
		stale := 0
		for id := range e.written {
			for _, sg := range e.metadataOf(id).Segments {
				for _, b := range sg.Ensemble {
					if b.ID == victim && b.InstanceID != ck.InstanceID {
						stale++
					}
				}
			}
		}
		marks := e.marks()
		limbo := e.bk.Server(1).InLimbo()
		return stale == 0 && len(marks) == 0 && !limbo, fmt.Sprintf("%d ensemble places name the old instance; marks %+v; in limbo %v", stale, marks, limbo)
	})
	e.verifyReplicas()
	if _, err := e.store.Get(e.ctx(), bookie.DecommissionKeyPrefix+victim, metadata.ReadOptions{}); err == nil {
		t.Error("the decommission of the format was not withdrawn when the limbo ended")
	}
}
