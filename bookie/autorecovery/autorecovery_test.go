package autorecovery_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridianmq/meridian/bookie/autorecovery"
	"github.com/meridianmq/meridian/bookie/ledger"
)

// TestAutorecoveryRestoresReplicaCount: closed ledgers (E=3/Qw=2/Qa=2 and
// E=Qw=Qa=3) across 5 bookies in 3 racks, plus one ledger still being
// written when a bookie is killed for good. The auditor marks the closed
// ledgers that used the bookie, workers re-replicate them, and afterwards no
// ensemble names the bookie and every entry is on every bookie of its write
// set again. The open ledger is left to its writer (ensemble change) until
// it is closed; its old segment is then repaired too.
func TestAutorecoveryRestoresReplicaCount(t *testing.T) {
	e := newEnv(t, 5)
	open := e.create(3, 2, 2)
	e.append(open, 30)
	e.closedLedgers()
	victim, affected := e.pickVictim(e.metadataOf(open.ID()).Segments[0].Ensemble)
	victimID := e.bk.ID(victim)
	t.Logf("victim %s is used by ledgers %v (open ledger %d)", victimID, affected, open.ID())

	regA, regB, regW := prometheus.NewRegistry(), prometheus.NewRegistry(), prometheus.NewRegistry()
	a1 := e.startAuditor("auditor-1", regA)
	a2 := e.startAuditor("auditor-2", regB)
	e.startWorker(e.workerConfig("worker-1", regW))
	e.startWorker(e.workerConfig("worker-2", regW))

	e.waitFor("an auditor elected", 20*time.Second, func() (bool, string) {
		return a1.IsLeader() != a2.IsLeader(), fmt.Sprintf("leaders: %v %v", a1.IsLeader(), a2.IsLeader())
	})
	e.bk.Kill(victim) // for good: its registry session is left to expire
	// The writer goes on through an ensemble change; the ledger stays open.
	e.append(open, 20)
	// Every closed ledger gets repaired while the open one keeps the lost
	// bookie in its first segment: it belongs to its writer.
	e.waitFor("closed ledgers repaired", 45*time.Second, func() (bool, string) {
		using := e.ledgersUsing(victimID)
		return len(using) == 1 && using[0] == open.ID(), fmt.Sprintf("ledgers using %s: %v", victimID, using)
	})
	if md := e.metadataOf(open.ID()); md.State != ledger.StateOpen || !containsID(md.Segments[0].Ensemble, victimID) {
		t.Fatalf("open ledger touched by autorecovery: %+v", md)
	}
	if err := open.Close(e.ctx()); err != nil {
		t.Fatal(err)
	}
	if n := len(e.metadataOf(open.ID()).Segments); n < 2 {
		t.Fatalf("open ledger has %d segments after losing a bookie, want an ensemble change", n)
	}

	e.waitFor("every ledger repaired", 45*time.Second, e.repaired(victimID))
	e.verifyReplicas(victimID)

	if got := counterValue(t, regW, "meridian_autorecovery_rereplicated_ledgers_total"); got < float64(len(affected)) {
		t.Errorf("rereplicated ledgers = %v, want >= %d", got, len(affected))
	}
	if got := counterValue(t, regW, "meridian_autorecovery_rereplicated_entries_total"); got <= 0 {
		t.Errorf("rereplicated entries = %v, want > 0", got)
	}
	if got := counterValue(t, regW, "meridian_autorecovery_rereplicated_bytes_total"); got <= 0 {
		t.Errorf("rereplicated bytes = %v, want > 0", got)
	}
	leaders := counterValue(t, regA, "meridian_autorecovery_auditor_leader") + counterValue(t, regB, "meridian_autorecovery_auditor_leader")
	if leaders != 1 {
		t.Errorf("auditor leader gauges sum to %v, want 1", leaders)
	}
	e.waitFor("under-replicated gauge back to 0", 10*time.Second, func() (bool, string) {
		g := counterValue(t, regA, "meridian_autorecovery_under_replicated_ledgers") + counterValue(t, regB, "meridian_autorecovery_under_replicated_ledgers")
		return g == 0, fmt.Sprintf("gauge %v", g)
	})
	st, err := autorecovery.Status(e.ctx(), e.store)
	if err != nil {
		t.Fatal(err)
	}
	if st.Paused || st.UnderReplicatedCount != 0 || st.Auditor == "" {
		t.Errorf("status = %+v, want not paused, no marks, an auditor", st)
	}
	for _, b := range st.Bookies {
		if b.ID == victimID && b.Live {
			t.Errorf("status says the killed bookie is live: %+v", b)
		}
	}

	// Leadership moves when the leader closes.
	leader, other := a1, a2
	if a2.IsLeader() {
		leader, other = a2, a1
	}
	leader.Close()
	e.waitFor("the other auditor takes over", 20*time.Second, func() (bool, string) {
		return other.IsLeader(), "not leader"
	})
}

// TestAutorecoveryPauseResume: while paused, a lost bookie is neither marked
// by the auditor nor repaired by workers; after Resume both happen.
func TestAutorecoveryPauseResume(t *testing.T) {
	e := newEnv(t, 5)
	e.closedLedgers()
	victim, affected := e.pickVictim(nil)
	victimID := e.bk.ID(victim)
	if err := autorecovery.Pause(e.ctx(), e.store, "rack maintenance"); err != nil {
		t.Fatal(err)
	}
	a := e.startAuditor("auditor", nil)
	e.waitFor("auditor elected", 20*time.Second, func() (bool, string) { return a.IsLeader(), "" })
	e.bk.Stop(victim)

	// Paused auditor: the bookie is gone well past LostBookieDelay (1 s)
	// and nothing is marked.
	unchanged := func() (bool, string) {
		using := e.ledgersUsing(victimID)
		return len(using) == len(affected), fmt.Sprintf("ledgers using the victim: %v, want %v", using, affected)
	}
	noMarks := func() (bool, string) { m := e.marks(); return len(m) == 0, fmt.Sprintf("marks %+v", m) }
	e.holdsFor("no marks while paused", 2500*time.Millisecond, func() (bool, string) {
		if ok, d := noMarks(); !ok {
			return ok, d
		}
		return unchanged()
	})
	st, err := autorecovery.Status(e.ctx(), e.store)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Paused || st.PausedReason != "rack maintenance" {
		t.Fatalf("status = %+v, want paused for rack maintenance", st)
	}

	// Resume with no worker: the auditor marks every affected ledger.
	if err := autorecovery.Resume(e.ctx(), e.store); err != nil {
		t.Fatal(err)
	}
	e.waitFor("affected ledgers marked", 20*time.Second, func() (bool, string) {
		m := e.marks()
		return len(m) == len(affected), fmt.Sprintf("marks %+v, want %d", m, len(affected))
	})
	for _, m := range e.marks() {
		if len(m.Missing) != 1 || m.Missing[0] != victimID {
			t.Fatalf("mark %+v, want missing [%s]", m, victimID)
		}
	}

	// Paused worker: marks stay, metadata unchanged.
	if err := autorecovery.Pause(e.ctx(), e.store, "again"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e.startWorker(e.workerConfig("worker", reg))
	e.holdsFor("marks stay while paused", 2*time.Second, func() (bool, string) {
		if m := e.marks(); len(m) != len(affected) {
			return false, fmt.Sprintf("marks %+v", m)
		}
		return unchanged()
	})
	if got := counterValue(t, reg, "meridian_autorecovery_rereplicated_entries_total"); got != 0 {
		t.Fatalf("paused worker copied %v entries", got)
	}

	if err := autorecovery.Resume(e.ctx(), e.store); err != nil {
		t.Fatal(err)
	}
	e.waitFor("every ledger repaired", 45*time.Second, e.repaired(victimID))
	e.verifyReplicas(victimID)
}

// TestDecommissionMovesLedgersOffLiveBookie: a decommissioned bookie keeps
// running, yet its closed ledgers move to other bookies at once.
func TestDecommissionMovesLedgersOffLiveBookie(t *testing.T) {
	e := newEnv(t, 5)
	e.closedLedgers()
	victim, affected := e.pickVictim(nil)
	victimID := e.bk.ID(victim)
	t.Logf("decommissioning %s, used by %v", victimID, affected)
	e.startAuditor("auditor", nil)
	reg := prometheus.NewRegistry()
	wcfg := e.workerConfig("worker", reg)
	wcfg.MaxMarksPerPoll = 2 // several pages of marks
	e.startWorker(wcfg)
	if err := autorecovery.Decommission(e.ctx(), e.store, victimID); err != nil {
		t.Fatal(err)
	}
	e.waitFor("ledgers moved off the decommissioned bookie", 45*time.Second, e.repaired(victimID))
	if !e.bk.Running(victim) {
		t.Fatal("victim stopped")
	}
	e.verifyReplicas(victimID)
	if got := counterValue(t, reg, "meridian_autorecovery_rereplicated_ledgers_total"); got != float64(len(affected)) {
		t.Errorf("rereplicated ledgers = %v, want %d", got, len(affected))
	}
	st, err := autorecovery.Status(e.ctx(), e.store)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, b := range st.Bookies {
		if b.ID == victimID {
			found = true
			if !b.Live || !b.Decommissioned {
				t.Errorf("status of %s = %+v, want live and decommissioned", victimID, b)
			}
		}
	}
	if !found {
		t.Fatalf("status lacks %s: %+v", victimID, st.Bookies)
	}
	if err := autorecovery.Recommission(e.ctx(), e.store, victimID); err != nil {
		t.Fatal(err)
	}
	st, err = autorecovery.Status(e.ctx(), e.store)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range st.Bookies {
		if b.ID == victimID && b.Decommissioned {
			t.Errorf("still decommissioned after Recommission: %+v", b)
		}
	}
}
