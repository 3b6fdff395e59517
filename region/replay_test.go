package region_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/client"
)

// Cross-region replay: a start position by time, origin position or
// message ID selects the same messages in every region, whatever order
// each region's copy interleaves the origins in.

// replayKey names a delivered message in every region: origin region,
// origin_seq of its entry and its index in the batch.
type replayKey struct {
	origin string
	seq    int64
	batch  int32
}

// replayRecv is Receive (consumer) or Next (reader).
type replayRecv func(ctx context.Context) (*client.ReceivedMessage, error)

// collectReplay receives until nothing arrives for 3 s (for want > 0:
// until want messages arrived, then nothing more for 300 ms) and
// returns the set of messages received (failing on a message without an
// origin key, or on one received twice). Nothing is produced meanwhile.
func collectReplay(t *testing.T, what string, want int, recv replayRecv, ack func(client.MessageID)) map[replayKey]bool {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	got := map[replayKey]bool{}
	for time.Now().Before(deadline) {
		idle := 3 * time.Second
		switch {
		case want > 0 && len(got) >= want:
			idle = 300 * time.Millisecond
		case want > 0:
			idle = 30 * time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), idle)
		m, err := recv(ctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return got
			}
			t.Fatalf("%s: receive: %v", what, err)
		}
		k := replayKey{m.OriginRegion, m.OriginSeq, m.ID.BatchIndex}
		if k.origin == "" || k.seq <= 0 {
			t.Fatalf("%s: message %v without origin key (%q, %d)", what, m.ID, k.origin, k.seq)
		}
		if got[k] {
			t.Fatalf("%s: %v delivered twice", what, k)
		}
		got[k] = true
		if ack != nil {
			ack(m.ID)
		}
	}
	t.Fatalf("%s: still receiving after 90 s (%d messages)", what, len(got))
	return nil
}

// sameSets fails unless every set equals the first one, and logs the
// per-origin counts.
func sameSets(t *testing.T, what string, names []string, sets []map[replayKey]bool) {
	t.Helper()
	perOrigin := map[string]int{}
	for k := range sets[0] {
		perOrigin[k.origin]++
	}
	t.Logf("%s: %d messages in every region, per origin %v", what, len(sets[0]), perOrigin)
	for i, s := range sets[1:] {
		var only0, onlyI []replayKey
		for k := range sets[0] {
			if !s[k] {
				only0 = append(only0, k)
			}
		}
		for k := range s {
			if !sets[0][k] {
				onlyI = append(onlyI, k)
			}
		}
		if len(only0)+len(onlyI) > 0 {
			sortKeys(only0)
			sortKeys(onlyI)
			t.Fatalf("%s: region %s and %s differ: %d only in %s (first %v), %d only in %s (first %v)", what, names[0], names[i+1],
				len(only0), names[0], firstKey(only0), len(onlyI), names[i+1], firstKey(onlyI))
		}
	}
}

func sortKeys(ks []replayKey) {
	sort.Slice(ks, func(i, j int) bool {
		a, b := ks[i], ks[j]
		return a.origin < b.origin || a.origin == b.origin && (a.seq < b.seq || a.seq == b.seq && a.batch < b.batch)
	})
}

func firstKey(ks []replayKey) string {
	if len(ks) == 0 {
		return "-"
	}
	return fmt.Sprint(ks[0])
}

// suffixPerOrigin checks that, per origin, the set holds every entry from
// its lowest origin_seq on up to the highest the origin produced (a start
// cuts each origin once: nothing after it is skipped).
func suffixPerOrigin(t *testing.T, what string, set map[replayKey]bool, all map[replayKey]bool) {
	t.Helper()
	low := map[string]int64{}
	for k := range set {
		if l, ok := low[k.origin]; !ok || k.seq < l {
			low[k.origin] = k.seq
		}
	}
	for k := range all {
		l, ok := low[k.origin]
		if ok && k.seq >= l && !set[k] {
			t.Fatalf("%s: %v skipped although origin %s starts at seq %d", what, k, k.origin, l)
		}
	}
}

// TestReplaySameMessagesInEveryRegion: three regions replicate one topic
// and all produce at once; then in every region a reader and a seek of a
// durable subscription by time, by origin position and by the local
// message ID of the same message deliver exactly the same set of
// (origin, origin_seq) — a non-trivial part of every origin's messages.
func TestReplaySameMessagesInEveryRegion(t *testing.T) {
	names := []string{"a", "b", "c"}
	g := startGeo(t, names, geoOptions{})
	g.createNamespace("public/replay", names...)
	topic := "public/replay/t1"
	var readers []*geoReader
	var prods []*geoProducer
	for _, n := range names {
		readers = append(readers, g.reader(n, topic))
		prods = append(prods, g.producer(n, topic))
	}
	stop := make(chan struct{})
	done := make(chan struct{}, len(prods))
	for _, p := range prods {
		go func() {
			defer func() { done <- struct{}{} }()
			p.produceFor(stop, 10)
		}()
	}
	time.Sleep(time.Second)
	at := time.Now()
	time.Sleep(time.Second)
	close(stop)
	for range prods {
		<-done
	}
	g.converge(geoConverge, readers, prods)

	// Everything, from earliest, to check the sets against.
	ctx := context.Background()
	clients := map[string]*client.Client{}
	for _, n := range names {
		c, err := client.New(ctx, client.Options{URL: g.url(n), MaxBackoff: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = c.Close(cctx)
		})
		clients[n] = c
	}
	readFrom := func(region string, sp client.StartPosition, want int) map[replayKey]bool {
		t.Helper()
		r, err := clients[region].NewReader(ctx, client.ReaderOptions{Topic: topic, Start: sp})
		if err != nil {
			t.Fatalf("reader in %s from %s: %v", region, sp, err)
		}
		defer r.Close(ctx)
		return collectReplay(t, "reader in "+region+" from "+sp.String(), want, r.Next, nil)
	}
	total := 0
	for _, p := range prods {
		total += len(p.ackedKeys())
	}
	all := readFrom("a", client.StartEarliest(), total)
	if len(all) != total {
		t.Fatalf("reader from earliest: %d messages, %d acknowledged", len(all), total)
	}

	// A durable subscription per region, consumed (and acknowledged) to
	// the end first, then moved by Seek.
	subs := map[string]*client.Consumer{}
	for _, n := range names {
		co, err := clients[n].Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "replay", InitialPosition: client.Earliest})
		if err != nil {
			t.Fatal(err)
		}
		ackAll := func(id client.MessageID) { _ = co.Ack(ctx, id) }
		if got := collectReplay(t, "subscription in "+n, len(all), co.Receive, ackAll); len(got) != len(all) {
			t.Fatalf("subscription in %s: %d messages from earliest, the reader %d", n, len(got), len(all))
		}
		subs[n] = co
	}
	seekSet := func(region string, sp client.StartPosition, want int) map[replayKey]bool {
		t.Helper()
		co := subs[region]
		if err := co.Seek(ctx, sp); err != nil {
			t.Fatalf("seek in %s to %s: %v", region, sp, err)
		}
		return collectReplay(t, "seek in "+region+" to "+sp.String(), want, co.Receive, func(id client.MessageID) { _ = co.Ack(ctx, id) })
	}

	check := func(what string, sps map[string]client.StartPosition) {
		t.Helper()
		var rs, ss []map[replayKey]bool
		for _, n := range names {
			want := 0
			if len(rs) > 0 {
				want = len(rs[0]) // the others must have as many (and no more)
			}
			rs = append(rs, readFrom(n, sps[n], want))
			ss = append(ss, seekSet(n, sps[n], len(rs[0])))
		}
		sameSets(t, what+" (readers)", names, rs)
		sameSets(t, what+" (seeks)", names, ss)
		sameSets(t, what+" (reader and seek)", names[:2], []map[replayKey]bool{rs[0], ss[0]})
		suffixPerOrigin(t, what, rs[0], all)
		if len(rs[0]) == 0 || len(rs[0]) == len(all) {
			t.Fatalf("%s: %d of %d messages: the test selects nothing or everything", what, len(rs[0]), len(all))
		}
	}

	byTime := map[string]client.StartPosition{}
	for _, n := range names {
		byTime[n] = client.StartAtTime(at)
	}
	check("time "+at.UTC().Format(time.RFC3339Nano), byTime)

	// The origin position of a message produced in b halfway, and its
	// local ID in each region.
	target := msgKey{"b", prods[1].next / 2}
	byOrigin, byID := map[string]client.StartPosition{}, map[string]client.StartPosition{}
	var origin client.OriginPosition
	for i, n := range names {
		readers[i].mu.Lock()
		id, ok := readers[i].seen[target]
		readers[i].mu.Unlock()
		if !ok {
			t.Fatalf("region %s never saw %v", n, target)
		}
		if n == "b" {
			origin = client.OriginPosition{Region: "b", LedgerID: id.LedgerID, EntryID: id.EntryID}
		}
		byID[n] = client.StartAtMessageID(id)
	}
	for _, n := range names {
		byOrigin[n] = client.StartAtOrigin(origin)
	}
	check("origin "+byOrigin["a"].String(), byOrigin)
	check("message ID of "+fmt.Sprint(target), byID)

	// Bad input: an origin position no region holds names the field.
	_, err := clients["c"].NewReader(ctx, client.ReaderOptions{Topic: topic,
		Start: client.StartAtOrigin(client.OriginPosition{Region: "b", LedgerID: origin.LedgerID, EntryID: origin.EntryID + 1_000_000})})
	if err == nil || !strings.Contains(err.Error(), "start.origin") {
		t.Fatalf("reader at an unknown origin position: %v", err)
	}
	t.Logf("unknown origin position: %v", err)
}

// TestReplayResetReplicatedSubscription: two regions produce at once; a
// replicated subscription is consumed to the end in a, then reset by time
// (admin reset-cursor) in a: the reset reaches b, and the subscription
// delivers the same (origin, origin_seq) set in both regions — the one a
// reader from that time reads.
func TestReplayResetReplicatedSubscription(t *testing.T) {
	names := []string{"a", "b"}
	g := startGeo(t, names, geoOptions{})
	g.createNamespace("public/replay", names...)
	topic := "public/replay/t1"
	var readers []*geoReader
	var prods []*geoProducer
	for _, n := range names {
		readers = append(readers, g.reader(n, topic))
		prods = append(prods, g.producer(n, topic))
	}
	stop := make(chan struct{})
	done := make(chan struct{}, len(prods))
	for _, p := range prods {
		go func() {
			defer func() { done <- struct{}{} }()
			p.produceFor(stop, 10)
		}()
	}
	time.Sleep(700 * time.Millisecond)
	at := time.Now()
	time.Sleep(700 * time.Millisecond)
	close(stop)
	for range prods {
		<-done
	}
	g.converge(geoConverge, readers, prods)
	ctx := context.Background()
	ca, cb := repSubClient(t, g, "a"), repSubClient(t, g, "b")

	r, err := ca.NewReader(ctx, client.ReaderOptions{Topic: topic, Start: client.StartAtTime(at)})
	if err != nil {
		t.Fatal(err)
	}
	want := collectReplay(t, "reader in a from the time", 0, r.Next, nil)
	_ = r.Close(ctx)

	// Consumed and acknowledged to the end in a; b follows.
	co, err := ca.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "rs", Replicated: true, InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, p := range prods {
		total += len(p.ackedKeys())
	}
	collectReplay(t, "replicated subscription in a", total, co.Receive, func(id client.MessageID) { _ = co.Ack(ctx, id) })
	if err := co.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the acknowledgements replicated to b", func() bool {
		s := g.subStats("b", topic, "rs")
		return s != nil && s.GetBacklogEntries() == 0
	})

	adm, err := ca.Admin()
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.ResetSubscriptionTo(ctx, topic, "rs", client.StartAtTime(at)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the reset applied in b", func() bool {
		s := g.subStats("b", topic, "rs")
		return s != nil && s.GetBacklogEntries() > 0
	})
	// Received without acknowledging, so neither region moves the other.
	var sets []map[replayKey]bool
	for _, c := range []*client.Client{cb, ca} {
		co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "rs", Replicated: true})
		if err != nil {
			t.Fatal(err)
		}
		sets = append(sets, collectReplay(t, "replicated subscription after the reset", len(want), co.Receive, nil))
		if err := co.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sameSets(t, "reset by time: b, a and a reader from the time", []string{"b", "a", "reader"}, append(sets, want))
	if len(want) == 0 || len(want) == total {
		t.Fatalf("the time selects %d of %d messages: nothing or everything", len(want), total)
	}

	// A consumer's Seek in b, to the origin position of a message produced
	// in a early on (before the time: a larger set), moves the
	// subscription in a too.
	target := msgKey{"a", prods[0].next / 4}
	readers[0].mu.Lock()
	id, ok := readers[0].seen[target]
	readers[0].mu.Unlock()
	if !ok {
		t.Fatalf("region a never saw %v", target)
	}
	sp := client.StartAtOrigin(client.OriginPosition{Region: "a", LedgerID: id.LedgerID, EntryID: id.EntryID})
	r, err = cb.NewReader(ctx, client.ReaderOptions{Topic: topic, Start: sp})
	if err != nil {
		t.Fatal(err)
	}
	want2 := collectReplay(t, "reader in b from "+sp.String(), 0, r.Next, nil)
	_ = r.Close(ctx)
	entries := map[replayKey]bool{}
	for k := range want2 {
		entries[replayKey{k.origin, k.seq, 0}] = true
	}
	if len(want2) <= len(want) {
		t.Fatalf("origin position %s selects %d messages, the later time %d", sp, len(want2), len(want))
	}
	co, err = cb.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "rs", Replicated: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := co.Seek(ctx, sp); err != nil {
		t.Fatal(err)
	}
	got := collectReplay(t, "replicated subscription in b after Seek", len(want2), co.Receive, nil)
	if err := co.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the seek applied in a", func() bool {
		s := g.subStats("a", topic, "rs")
		return s != nil && s.GetBacklogEntries() == int64(len(entries))
	})
	co, err = ca.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "rs", Replicated: true})
	if err != nil {
		t.Fatal(err)
	}
	gotA := collectReplay(t, "replicated subscription in a after the Seek in b", len(want2), co.Receive, nil)
	_ = co.Close(ctx)
	sameSets(t, "Seek in b to "+sp.String()+": b, a and a reader", []string{"b", "a", "reader"}, []map[replayKey]bool{got, gotA, want2})
}
