package check

import (
	"strings"
	"testing"
)

// repSubs are the run's replicated subscription "s" of topic t (created at
// earliest before the first message).
var repSubs = []Subscription{{Region: "a", Topic: "t", Name: "s", Type: "exclusive", Replicated: true}}

// op records an operator action that started with the previous record.
func (b *hb) op(o Op) *hb {
	o.Started = b.recs[len(b.recs)-1].T
	return b.add(Record{Kind: KindOp, Op: &o})
}

func (b *hb) deliverRep(region, sub, producer string, seqs ...int64) *hb {
	for _, s := range seqs {
		r := msg(KindDeliver, region, producer, s)
		r.Sub, r.SubType, r.Replicated = sub, "exclusive", true
		b.add(r)
	}
	return b
}

func TestCheckCompletenessDeliveredInSomeRegion(t *testing.T) {
	// Delivered once, in either region: complete.
	b := newHB(repSubs...).sendAck("a", "p1", 1, 2, 3).deliverRep("a", "s", "p1", 1, 2).deliverRep("b", "s", "p1", 3)
	wantResult(t, run(t, b, CheckCompleteness, Options{}), true, 0)
	// #4 acknowledged, never delivered to s anywhere: incomplete. A local
	// subscription's delivery does not count.
	b.sendAck("b", "p1", 4).deliver("a", "local", "exclusive", "p1", 4)
	r := run(t, b, CheckCompleteness, Options{})
	wantResult(t, r, false, 1)
	if !strings.Contains(r.Examples[0], "a/p1#4") || !strings.Contains(r.Detail, "t:s: 1") {
		t.Fatalf("detail %q examples %q", r.Detail, r.Examples)
	}
	// An unacknowledged send is not owed.
	b = newHB(repSubs...).sendAck("a", "p1", 1).deliverRep("a", "s", "p1", 1)
	b.add(msg(KindSend, "a", "p1", 2)).add(msg(KindTimeout, "a", "p1", 2))
	wantResult(t, run(t, b, CheckCompleteness, Options{}), true, 0)
}

func TestCheckCompletenessCreatedAtLatest(t *testing.T) {
	// op-sub is created at latest in b after #1 was sent: #1 is not owed,
	// #2 (sent after) is delivered.
	b := newHB().sendAck("a", "p1", 1).
		op(Op{Action: OpCreateSubscription, Region: "b", Topic: "t", Sub: "op-sub", Replicated: true, Position: "latest"}).
		sendAck("a", "p1", 2).deliverRep("b", "op-sub", "p1", 2)
	wantResult(t, run(t, b, CheckCompleteness, Options{}), true, 0)
	// #3 sent after the creation, never delivered: incomplete.
	b.sendAck("a", "p1", 3)
	wantResult(t, run(t, b, CheckCompleteness, Options{}), false, 1)
	// Created at earliest in a too (the partitioned case of issue 20 item
	// 2): every message is owed, #1 included.
	b = newHB().sendAck("a", "p1", 1, 2).
		op(Op{Action: OpCreateSubscription, Region: "a", Topic: "t", Sub: "op-sub", Replicated: true, Position: "earliest"}).
		op(Op{Action: OpCreateSubscription, Region: "b", Topic: "t", Sub: "op-sub", Replicated: true, Position: "latest"}).
		sendAck("a", "p1", 3).deliverRep("a", "op-sub", "p1", 3)
	r := run(t, b, CheckCompleteness, Options{})
	wantResult(t, r, false, 2)
	// A local subscription created by an operator action is not checked.
	b = newHB().sendAck("a", "p1", 1).op(Op{Action: OpCreateSubscription, Region: "a", Topic: "t", Sub: "loc", Position: "earliest"})
	wantResult(t, run(t, b, CheckCompleteness, Options{}), true, 0)
}

func TestCheckCompletenessExplicitSkip(t *testing.T) {
	// A reset to latest in b skips what was sent before it (#1, #2); #3,
	// sent after, is delivered.
	b := newHB(repSubs...).sendAck("a", "p1", 1, 2).
		op(Op{Action: OpSeek, Region: "b", Topic: "t", Sub: "s", Position: "latest"}).
		sendAck("a", "p1", 3).deliverRep("a", "s", "p1", 3)
	wantResult(t, run(t, b, CheckCompleteness, Options{}), true, 0)
	// #4, sent after the reset, never delivered: incomplete.
	b.sendAck("a", "p1", 4)
	wantResult(t, run(t, b, CheckCompleteness, Options{}), false, 1)
	// A reset to earliest skips nothing.
	b = newHB(repSubs...).sendAck("a", "p1", 1, 2).
		op(Op{Action: OpSeek, Region: "b", Topic: "t", Sub: "s", Position: "earliest"}).deliverRep("a", "s", "p1", 2)
	wantResult(t, run(t, b, CheckCompleteness, Options{}), false, 1)
	// A skip excuses what was sent before it; a skip of another
	// subscription excuses nothing here.
	b = newHB(repSubs...).sendAck("a", "p1", 1).op(Op{Action: OpSkip, Region: "a", Topic: "t", Sub: "s"})
	wantResult(t, run(t, b, CheckCompleteness, Options{}), true, 0)
	b = newHB(repSubs...).sendAck("a", "p1", 1).op(Op{Action: OpSkip, Region: "a", Topic: "t", Sub: "other"})
	wantResult(t, run(t, b, CheckCompleteness, Options{}), false, 1)
}

// deleted is a history in which t is deleted in a and re-created there
// after #1 (acknowledged by a) and #2 (by b) were acknowledged; #3 (by a)
// and #4 (by b) are acknowledged after the re-create.
func deleted() *hb {
	return newHB(repSubs...).sendAck("a", "p1", 1).sendAck("b", "p2", 2).
		op(Op{Action: OpDeleteTopic, Region: "a", Topic: "t"}).
		op(Op{Action: OpCreateTopic, Region: "a", Topic: "t"}).
		sendAck("a", "p1", 3).sendAck("b", "p2", 4)
}

func TestCheckCompletenessTopicDeleted(t *testing.T) {
	// #1 and #2 were acknowledged before the re-create: excused; #3 and
	// #4 are delivered.
	b := deleted().deliverRep("b", "s", "p1", 3).deliverRep("a", "s", "p2", 4)
	r := run(t, b, CheckCompleteness, Options{})
	wantResult(t, r, true, 0)
	if !strings.Contains(r.Detail, "2 excused") {
		t.Fatalf("detail %q", r.Detail)
	}
	// #3, acknowledged after the re-create, never delivered: incomplete.
	b = deleted().deliverRep("a", "s", "p2", 4)
	wantResult(t, run(t, b, CheckCompleteness, Options{}), false, 1)
}

func TestCheckLostTopicDeleted(t *testing.T) {
	// #1 (written in a before its delete) is needed nowhere; #2 (written
	// in b) only in b; #3 and #4 everywhere.
	b := deleted().read("b", "p2", 2).read("a", "p1", 3).read("b", "p1", 3).read("a", "p2", 4).read("b", "p2", 4)
	wantResult(t, run(t, b, CheckLost, Options{}), true, 0)
	wantResult(t, run(t, b, CheckDivergence, Options{}), true, 0)
	// #2 missing in b (not the deleted region): lost.
	b = deleted().read("a", "p1", 3).read("b", "p1", 3).read("a", "p2", 4).read("b", "p2", 4)
	wantResult(t, run(t, b, CheckLost, Options{}), false, 1)
	// #3, acknowledged by a after the re-create, never reaches b (issue 20
	// item 1: the re-created topic's entries answered DUPLICATE): lost
	// and divergent.
	b = deleted().read("b", "p2", 2).read("a", "p1", 3).read("a", "p2", 4).read("b", "p2", 4)
	r := run(t, b, CheckLost, Options{})
	wantResult(t, r, false, 1)
	if !strings.Contains(r.Examples[0], "a/p1#3") || !strings.Contains(r.Examples[0], "[b]") {
		t.Fatalf("examples %q", r.Examples)
	}
	wantResult(t, run(t, b, CheckDivergence, Options{}), false, 1)
}

func TestCheckStuckAndDivergenceAfterOperatorActions(t *testing.T) {
	// A copy of a/p1#1 is read back in b only: a lost it with its delete,
	// by request; not divergence.
	b := deleted().readCopy("b", "p1", 1, "a", "0:1:0").read("a", "p1", 3).read("b", "p1", 3)
	wantResult(t, run(t, b, CheckDivergence, Options{}), true, 0)
	// A subscription at backlog 0 whose undelivered messages a reset to
	// latest skipped is not stuck; without the reset it is.
	b = newHB(repSubs...).sendAck("a", "p1", 1, 2).
		op(Op{Action: OpSeek, Region: "a", Topic: "t", Sub: "s", Position: "latest"}).
		add(Record{Kind: KindPhase, Phase: "heal"}).
		sample("a", SeriesSubBacklog, map[string]string{"sub": "s", "topic": "t"}, 0)
	wantResult(t, run(t, b, CheckStuck, Options{}), true, 0)
	b = newHB(repSubs...).sendAck("a", "p1", 1, 2).
		add(Record{Kind: KindPhase, Phase: "heal"}).
		sample("a", SeriesSubBacklog, map[string]string{"sub": "s", "topic": "t"}, 0)
	wantResult(t, run(t, b, CheckStuck, Options{}), false, 1)
	// A subscription backlog left in b by a's delete of the topic is not
	// stuck; the same backlog without a delete is.
	stuckIn := func(b *hb) *hb {
		b.add(Record{Kind: KindPhase, Phase: "heal"})
		for range 5 {
			b.sample("b", SeriesSubBacklog, map[string]string{"sub": "s", "topic": "t"}, 3)
		}
		return b
	}
	wantResult(t, run(t, stuckIn(deleted()), CheckStuck, Options{}), true, 0)
	wantResult(t, run(t, stuckIn(newHB().sendAck("a", "p1", 1)), CheckStuck, Options{}), false, 1)
}
