package region_test

import (
	"testing"
)

// closeRaw ends a raw produce stream (the broker then releases the name).
func (p *rawProducer) closeRaw() {
	_ = p.st.CloseSend()
	_ = p.cc.Close()
}

// sendStored sends [seq, seq+n-1] and fails t unless it is stored (not
// answered duplicate: a duplicate answer to a message stored nowhere is a
// lost message the client counts as acknowledged).
func (p *rawProducer) sendStored(what string, seq int64, n int) {
	p.t.Helper()
	if rc := p.send(seq, n); rc.GetDuplicate() || rc.GetMessageId() == nil {
		p.t.Fatalf("%s: send of %d..%d answered duplicate %v: stored nowhere", what, seq, seq+int64(n)-1, rc)
	}
}

// TestFailoverDedupSameNameOtherProducer: one producer name writes in both
// regions, from two different producer instances (failover identities).
// The dedup state a failing-over producer meets in the target region must
// be its own stream's, not the other instance's that shares the name:
//   - y (in b) reaches sequence 999; x (in a) sends 0..9, fails over to b
//     and goes on with 10..19: all stored (not DUPLICATE of y's 999), and
//     its resend of 5 (replicated to b already) is answered duplicate;
//   - then y reconnects in b and goes on with 1000..1009, and a third
//     instance z that reached 5000 in a fails over to b: y's later sends
//     are not raised over by z's floor, and z's own are stored.
func TestFailoverDedupSameNameOtherProducer(t *testing.T) {
	g := startGeo(t, []string{"a", "b"}, geoOptions{})
	g.createNamespace("public/foname", "a", "b")
	topic := "public/foname/t"

	y := openRaw(t, g, "b", topic, "p", "id-y", nil)
	y.sendStored("y in b", 0, 500)
	y.sendStored("y in b", 500, 500)
	x := openRaw(t, g, "a", topic, "p", "id-x", nil)
	for s := int64(0); s < 10; s++ {
		x.sendStored("x in a", s, 1)
	}
	settleRepl(t, g, topic, "a", "b")
	y.closeRaw()
	x.closeRaw()

	xb := openRaw(t, g, "b", topic, "p", "id-x", []string{"a", "b"})
	if rc := xb.send(5, 1); !rc.GetDuplicate() {
		t.Fatalf("x's resend of 5 in b (replicated there already) answered %v, want duplicate", rc)
	}
	for s := int64(10); s < 20; s++ {
		xb.sendStored("x failed over to b", s, 1)
	}
	xb.closeRaw()

	z := openRaw(t, g, "a", topic, "p", "id-z", nil)
	z.sendStored("z in a", 0, 5000)
	settleRepl(t, g, topic, "a", "b")
	z.closeRaw()
	yb := openRaw(t, g, "b", topic, "p", "id-y", []string{"b"})
	yb.sendStored("y back in b", 1000, 10)
	yb.closeRaw()
	zb := openRaw(t, g, "b", topic, "p", "id-z", []string{"a", "b"})
	if rc := zb.send(4999, 1); !rc.GetDuplicate() {
		t.Fatalf("z's resend of 4999 in b answered %v, want duplicate", rc)
	}
	zb.sendStored("z failed over to b", 5000, 10)
	zb.closeRaw()
	yb2 := openRaw(t, g, "b", topic, "p", "id-y", []string{"b"})
	yb2.sendStored("y after z's failover", 1010, 10)
}
