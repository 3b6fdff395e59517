package region_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// Dedup across a client failover (broker/ident_dedup.go): a producer's
// messages stored both in the region it left (the stalled original) and in
// the region it moved to (the resend) are kept once in every region,
// whatever the order in which the two copies arrive, across broker
// restarts, and nothing acknowledged is lost.

// settleRepl waits until no region of names has a replication backlog for
// topic (every copy that will arrive has arrived).
func settleRepl(t *testing.T, g *geoCluster, topic string, names ...string) {
	t.Helper()
	// Settled: no backlog and the same entry counts at two polls in a row.
	last := map[string]int64{}
	waitFor(t, geoConverge, "replication of "+topic+" settled in "+strings.Join(names, ","), func() bool {
		settled := true
		for _, r := range names {
			st, err := g.stats(r, topic)
			if err != nil || len(st.GetReplicators()) != len(names)-1 {
				return false
			}
			for _, rs := range st.GetReplicators() {
				if rs.GetBacklogEntries() != 0 || !rs.GetConnected() {
					settled = false
				}
			}
			if n, ok := last[r]; !ok || n != st.GetEntries() {
				settled = false
			}
			last[r] = st.GetEntries()
		}
		if !settled {
			time.Sleep(400 * time.Millisecond)
		}
		return settled
	})
}

// logCopies reads region's whole log of topic from the earliest entry and
// returns how many copies it holds of each message, keyed by
// "producer/sequence ID". It reads until every message of want is seen and
// as many entries as the topic stores with replication settled (so a late
// duplicate copy is counted), then takes what remains of the last batch.
// perOrigin, when not nil, also counts them per first storing region,
// keyed by "producer/sequence ID@origin".
func logCopies(t *testing.T, g *geoCluster, region, topic string, want []string, perOrigin map[string]int) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), geoConverge)
	defer cancel()
	cl, err := client.New(ctx, client.Options{URL: g.url(region), MaxBackoff: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(context.Background())
	rd, err := cl.NewReader(ctx, client.ReaderOptions{Topic: topic, Start: client.StartEarliest()})
	if err != nil {
		t.Fatal(err)
	}
	type entry struct{ l, e int64 }
	entries := map[entry]bool{}
	copies := map[string]int{}
	first := map[string]string{}
	seenAll := func() bool {
		for _, k := range want {
			if copies[k] == 0 {
				return false
			}
		}
		return true
	}
	stored := int64(-1)
	for {
		if seenAll() && int64(len(entries)) >= stored {
			st, err := g.stats(region, topic)
			if err == nil && int64(len(entries)) >= st.GetEntries() {
				break
			}
			if err == nil {
				stored = st.GetEntries()
			}
		}
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		m, err := rd.Next(rctx)
		rcancel()
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("read %s: %d entries read, %d stored, all wanted seen %v: %v", region, len(entries), stored, seenAll(), err)
			}
			continue
		}
		entries[entry{m.ID.LedgerID, m.ID.EntryID}] = true
		k := fmt.Sprintf("%s/%d", m.ProducerName, m.SequenceID)
		copies[k]++
		if perOrigin != nil {
			perOrigin[k+"@"+m.OriginRegion]++
		}
		if copies[k] > 1 {
			t.Logf("%s: %s again: origin %s seq %d at %v, publish %v", region, k, m.OriginRegion, m.OriginSeq, m.ID, m.PublishTime.Format("15:04:05.000"))
		} else {
			first[k] = fmt.Sprintf("origin %s seq %d at %v, publish %v", m.OriginRegion, m.OriginSeq, m.ID, m.PublishTime.Format("15:04:05.000"))
		}
	}
	for k, c := range copies {
		if c > 1 {
			t.Logf("%s: %s first: %s", region, k, first[k])
		}
	}
	// The rest of the last batch is already in the client's queue.
	for {
		rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		m, err := rd.Next(rctx)
		rcancel()
		if err != nil {
			break
		}
		k := fmt.Sprintf("%s/%d", m.ProducerName, m.SequenceID)
		copies[k]++
		if perOrigin != nil {
			perOrigin[k+"@"+m.OriginRegion]++
		}
	}
	return copies
}

// dedupCopies turns on Config.DedupReplicatedCopies: the tests that expect
// one copy per region of a message stored by two regions need it.
func dedupCopies(_ string, _ int, cfg *broker.Config) { cfg.DedupReplicatedCopies = true }

// checkOnce asserts that region's log holds every message of want exactly
// once and nothing else more than once, and logs the counts.
func checkOnce(t *testing.T, region string, copies map[string]int, want []string) {
	t.Helper()
	var missing, twice []string
	for _, k := range want {
		if copies[k] == 0 {
			missing = append(missing, k)
		}
	}
	dups := 0
	for k, c := range copies {
		if c > 1 {
			twice = append(twice, fmt.Sprintf("%s x%d", k, c))
			dups += c - 1
		}
	}
	sort.Strings(twice)
	t.Logf("%s: %d messages stored, %d expected, %d missing, %d duplicate copies", region, len(copies), len(want), len(missing), dups)
	if len(missing) > 0 {
		t.Errorf("%s: acknowledged messages lost: %v", region, missing[:min(10, len(missing))])
	}
	if len(twice) > 0 {
		t.Errorf("%s: messages stored more than once: %v", region, twice[:min(10, len(twice))])
	}
}

// rawProducer is a produce stream opened by hand, to send chosen sequence
// IDs with a chosen failover identity in a chosen region.
type rawProducer struct {
	t  *testing.T
	cc *grpc.ClientConn
	st clientv1.Meridian_ProduceClient
}

// openRaw opens producer name with failover identity id and failover_from
// from on the owner of topic in region.
func openRaw(t *testing.T, g *geoCluster, region, topic, name, id string, from []string) *rawProducer {
	t.Helper()
	owner := regiontest.LookupOwner(t, strings.Split(g.url(region), ",")[0], topic, func(string) bool { return true })
	cc, err := grpc.NewClient(owner, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); cc.Close() })
	p := &rawProducer{t: t, cc: cc}
	waitFor(t, 30*time.Second, "producer opened in "+region, func() bool {
		p.st, err = clientv1.NewMeridianClient(cc).Produce(ctx)
		if err != nil {
			return false
		}
		if err := p.st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{
			Topic: topic, ProducerName: name, FailoverFrom: from, FailoverIdentity: id}}}); err != nil {
			return false
		}
		r, err := p.st.Recv()
		if err != nil {
			t.Logf("open producer in %s: %v", region, err)
			time.Sleep(200 * time.Millisecond)
			return false
		}
		return r.GetOpened() != nil
	})
	return p
}

// send sends the batch [seq, seq+n-1] and returns its receipt, which must
// not be an error.
func (p *rawProducer) send(seq int64, n int) *clientv1.SendReceipt {
	p.t.Helper()
	b := &clientv1.Batch{}
	for i := range n {
		b.Messages = append(b.Messages, &clientv1.SingleMessage{Payload: fmt.Appendf(nil, "m%d", seq+int64(i))})
	}
	payload, err := proto.Marshal(b)
	if err != nil {
		p.t.Fatal(err)
	}
	if err := p.st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Send{Send: &clientv1.Send{
		SequenceId: seq, NumMessages: int32(n), UncompressedSize: int64(len(payload)), Payload: payload}}}); err != nil {
		p.t.Fatal(err)
	}
	r, err := p.st.Recv()
	if err != nil {
		p.t.Fatalf("receipt of %d: %v", seq, err)
	}
	rc := r.GetReceipt()
	if rc.GetError() != nil || rc.GetSequenceId() != seq {
		p.t.Fatalf("send of %d answered %v", seq, rc)
	}
	return rc
}

// seqKeys returns "name/s" for s in [lo, hi].
func seqKeys(name string, lo, hi int) []string {
	var out []string
	for s := lo; s <= hi; s++ {
		out = append(out, fmt.Sprintf("%s/%d", name, s))
	}
	return out
}

// TestFailoverDedupStalledResend is the failure of the closing note: the
// client's path to a is cut while a dedup producer sends; batches stall in
// the connection, the client resends them in b, and after the heal the
// stalled bytes reach a. Afterwards each region's log holds every message,
// none twice from the same storing region (a stalled original that reached
// a after b's copy was replicated there is answered duplicate; one that
// reached a first is kept beside b's copy, the default), and nothing
// acknowledged is lost.
func TestFailoverDedupStalledResend(t *testing.T) {
	g, topic := foSetup(t)
	w := startWorkload(t, g, topic, foTimings, proxyClientPath(t, g, "a"))
	w.waitProgress("a", 100, 30*time.Second)
	fault := time.Now()
	g.net.Cut("client", "a", false)
	w.waitSwitch("b", fault, foSwitchBound(foTimings))
	w.waitProgress("b", 100, 30*time.Second)
	heal := time.Now()
	g.net.Heal("client", "a")
	w.waitSwitch("a", heal, foTimings.SwitchBackDelay+foSwitchBound(foTimings)+10*time.Second)
	w.waitProgress("a", 50, 30*time.Second)
	w.checkNoLoss(geoConverge)
	w.halt()
	settleRepl(t, g, topic, "a", "b")
	w.mu.Lock()
	var want []string
	for n := range w.acked {
		// Sequence IDs are the message numbers: one producer, from 0.
		want = append(want, fmt.Sprintf("fo-producer/%d", n))
	}
	w.mu.Unlock()
	st := w.p.Stats()
	t.Logf("producer: %+v", st)
	for _, r := range []string{"a", "b"} {
		per := map[string]int{}
		checkOncePerOrigin(t, r, logCopies(t, g, r, topic, want, per), per, want)
	}
}

// checkOncePerOrigin asserts that region's log holds every message of want
// and no copy first stored by one region twice; a message held as copies
// first stored by two regions (both accepted it: the stalled original
// reached a before b's copy did) is allowed by default
// (Config.DedupReplicatedCopies off) and logged.
func checkOncePerOrigin(t *testing.T, region string, copies, perOrigin map[string]int, want []string) {
	t.Helper()
	var missing, twice []string
	for _, k := range want {
		if copies[k] == 0 {
			missing = append(missing, k)
		}
	}
	for k, c := range perOrigin {
		if c > 1 {
			twice = append(twice, fmt.Sprintf("%s x%d", k, c))
		}
	}
	both := 0
	for _, c := range copies {
		if c > 1 {
			both++
		}
	}
	sort.Strings(twice)
	t.Logf("%s: %d messages stored, %d expected, %d missing, %d held as copies first stored by two regions", region, len(copies), len(want), len(missing), both)
	if len(missing) > 0 {
		t.Errorf("%s: acknowledged messages lost: %v", region, missing[:min(10, len(missing))])
	}
	if len(twice) > 0 {
		t.Errorf("%s: copies first stored by one region stored more than once: %v", region, twice[:min(10, len(twice))])
	}
}

// TestFailoverDedupArrivalOrder: three regions; a producer stores 0..9 in a
// while a is cut off from b and c, fails over to b and sends 5..14 there
// (resends of 5..9, new 10..14). In c b's copies arrive first (a high-water
// mark would then drop a's 0..4: lost); a second producer does the same
// with c cut off from b instead, so that c gets a's copies first. After
// the heals every region holds each message exactly once; in a, a late
// resend on the original stream of a message b already replicated there
// is answered duplicate.
func TestFailoverDedupArrivalOrder(t *testing.T) {
	names := []string{"a", "b", "c"}
	g := startGeo(t, names, geoOptions{broker: dedupCopies})
	g.createNamespace("public/fo3", names...)
	topic := "public/fo3/t"
	for i, tc := range []struct {
		name, id string
		cut      [][2]string // replication links cut while the producer moves
	}{
		{"p", "id-bfirst", [][2]string{{"a", "b"}, {"a", "c"}}},
		{"q", "id-afirst", [][2]string{{"a", "b"}, {"b", "c"}}},
	} {
		for _, l := range tc.cut {
			g.net.Cut(l[0], l[1], false)
		}
		pa := openRaw(t, g, "a", topic, tc.name, tc.id, nil)
		pa.send(0, 5) // one batch: in c not covered by b's 5..14, stored
		for s := int64(5); s < 10; s++ {
			pa.send(s, 1)
		}
		pb := openRaw(t, g, "b", topic, tc.name, tc.id, []string{"a", "b"})
		for s := int64(5); s < 15; s++ {
			pb.send(s, 1)
		}
		if i == 0 {
			// Let b's copies reach c before a's.
			waitFor(t, geoConverge, "b's copies in c", func() bool {
				st, err := g.stats("c", topic)
				return err == nil && st.GetEntries() >= 10
			})
		} else {
			waitFor(t, geoConverge, "a's copies in c", func() bool {
				st, err := g.stats("c", topic)
				return err == nil && st.GetEntries() >= 10+6
			})
		}
		for _, l := range tc.cut {
			g.net.Heal(l[0], l[1])
		}
		settleRepl(t, g, topic, names...)
		// a holds 0..4 (one entry), 5..9 and b's 10..14 of each producer
		// so far: 11 entries each.
		waitFor(t, geoConverge, "b's copies in a", func() bool {
			st, err := g.stats("a", topic)
			return err == nil && st.GetEntries() >= int64(11*(i+1))
		})
		// The stalled original reaching a after b's copy: a duplicate.
		if rc := pa.send(12, 1); !rc.GetDuplicate() {
			t.Fatalf("%s: late send of 12 in a answered %v, want duplicate", tc.name, rc)
		}
	}
	settleRepl(t, g, topic, names...)
	want := append(seqKeys("p", 0, 14), seqKeys("q", 0, 14)...)
	for _, r := range names {
		checkOnce(t, r, logCopies(t, g, r, topic, want, nil), want)
	}
}

// TestFailoverDedupTakeover: b's broker crashes and restarts between the
// two copies (the resend stored in b, the original still on its way from
// a): the takeover scan rebuilds the stored sequence IDs from the entries,
// so a's copies are still recognised. Then a's topic is unloaded (the
// dedup snapshot path) and a late copy is still answered duplicate; and
// b's broker crashes again, losing the progress of the entries it skipped,
// and a's later entries still reach it.
func TestFailoverDedupTakeover(t *testing.T) {
	g := startGeo(t, []string{"a", "b"}, geoOptions{broker: dedupCopies})
	g.createNamespace("public/fo", "a", "b")
	topic := "public/fo/takeover"
	g.net.Cut("a", "b", false)
	pa := openRaw(t, g, "a", topic, "r", "id-r", nil)
	for s := int64(0); s < 10; s++ {
		pa.send(s, 1)
	}
	pb := openRaw(t, g, "b", topic, "r", "id-r", []string{"a", "b"})
	for s := int64(5); s < 15; s++ {
		pb.send(s, 1)
	}
	i := g.ownerIndex("b", topic)
	g.kill("b", i)
	g.restart("b", i)
	g.net.Heal("a", "b")
	settleRepl(t, g, topic, "a", "b")
	want := seqKeys("r", 0, 14)
	for _, r := range []string{"a", "b"} {
		checkOnce(t, r, logCopies(t, g, r, topic, want, nil), want)
	}
	// Gracefully unloaded (snapshot written), then taken again: a late send
	// of a copy b replicated to a is still a duplicate.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, err := client.NewAdmin(ctx, g.url("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close(ctx)
	if err := adm.UnloadTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	pa2 := openRaw(t, g, "a", topic, "r", "id-r", nil)
	if rc := pa2.send(13, 1); !rc.GetDuplicate() {
		t.Fatalf("late send of 13 in a after a reload answered %v, want duplicate", rc)
	}
	// b crashes again: the progress of the entries it skipped (a's 5..9,
	// in memory and in no stored entry) is gone. a's later entries still
	// reach b: the skips do not stall replication.
	i = g.ownerIndex("b", topic)
	if i < 0 {
		lookupAny(g.url("b"), topic)
		i = g.ownerIndex("b", topic)
	}
	if i >= 0 {
		g.kill("b", i)
		g.restart("b", i)
	}
	for s := int64(15); s < 20; s++ {
		pa2.send(s, 1)
	}
	settleRepl(t, g, topic, "a", "b")
	want = append(want, seqKeys("r", 15, 19)...)
	for _, r := range []string{"a", "b"} {
		checkOnce(t, r, logCopies(t, g, r, topic, want, nil), want)
	}
}
