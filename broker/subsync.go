package broker

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/replicator"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Replicated subscriptions: shipping.
//
// A replicated subscription's acknowledgement vector V (its cover, see
// subcover.go) is shipped by the topic's owner to the owner of the topic
// in every other region of the namespace, on one ReplicateSubscriptions
// stream per topic and remote region. A sender ships, for each replicated
// subscription whose V changed and is not already contained in what the
// remote is known to have, batched at most every subSyncFlush, a delta:
// V minus what it last sent on the stream (sendState.sent: what the
// remote confirmed from us or sent us, joined with the requests in
// flight). Vectors are joins, so the remote holding W ⊇ sent and joining
// the delta holds all of V (ackvector_delta.go). The whole V goes instead
// on every new stream (a restarted receiver may have lost state it had
// not persisted), after a reset (a higher reset epoch replaces, so it must
// be whole), after a refused request (sent falls back to what was
// confirmed), and every subscriptions.full_sync_interval (so anything a
// remote lost without a new stream heals). With no new acknowledgements a
// sender ships nothing but its keepalive (an empty request every
// replication.keepalive). Resending, reordering and relaying are
// harmless; because each region ships its joined V to every other,
// acknowledgements made in a reach c through b while the link a-c is down.

// subSyncFlush is the batching delay of a sender: acknowledgements are
// shipped at most this long after they are made (not one request per ack).
const subSyncFlush = 10 * time.Millisecond

// subSyncMaxUpdates bounds the subscriptions of one request, and
// subSyncMaxRanges the vector ranges one request carries (at least one
// update goes in each request, however large), so a request stays well
// under the stream's message size limit.
const (
	subSyncMaxUpdates = 256
	subSyncMaxRanges  = 100000
)

// tombstoneTTL is how long a deleted replicated subscription is
// remembered: its deletion is shipped until every remote confirmed it, and
// updates for it received meanwhile (sent before the remote learned of the
// deletion) do not create it again.
const tombstoneTTL = 10 * time.Minute

// subSync is a topic's replicated-subscription shipping state.
type subSync struct {
	// mu guards the fields below.
	mu      sync.Mutex
	senders map[string]*subSender
	tombs   map[string]tomb
	closed  bool
}

// tomb is a deleted replicated subscription.
type tomb struct {
	typ clientv1.SubscriptionType
	at  time.Time
}

// notify tells every sender that a replicated subscription changed.
func (ss *subSync) notify() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, x := range ss.senders {
		x.wakeup()
	}
}

// addTomb records the deletion of a replicated subscription.
func (ss *subSync) addTomb(name string, typ clientv1.SubscriptionType) {
	ss.mu.Lock()
	if ss.tombs == nil {
		ss.tombs = map[string]tomb{}
	}
	ss.tombs[name] = tomb{typ: typ, at: time.Now()}
	ss.mu.Unlock()
	ss.notify()
}

// isTomb reports whether name was deleted recently.
func (ss *subSync) isTomb(name string) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	tb, ok := ss.tombs[name]
	return ok && time.Since(tb.at) < tombstoneTTL
}

// liveTombs returns the tombstones still within their TTL (expired ones
// are dropped).
func (ss *subSync) liveTombs() map[string]tomb {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := map[string]tomb{}
	for n, tb := range ss.tombs {
		if time.Since(tb.at) >= tombstoneTTL {
			delete(ss.tombs, n)
			continue
		}
		out[n] = tb
	}
	return out
}

// sender returns the sender to remote (nil if none).
func (ss *subSync) sender(remote string) *subSender {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.senders[remote]
}

// senderList returns the senders sorted by remote region.
func (ss *subSync) senderList() []*subSender {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := make([]*subSender, 0, len(ss.senders))
	for _, x := range ss.senders {
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].remote < out[j].remote })
	return out
}

// stopAll stops every sender; none starts afterwards (the topic closes).
func (ss *subSync) stopAll() {
	ss.mu.Lock()
	ss.closed = true
	senders := ss.senders
	ss.senders = nil
	ss.mu.Unlock()
	for _, x := range senders {
		x.stopWait()
	}
}

// hasReplicated reports whether t has a replicated subscription.
func (t *topic) hasReplicated() bool {
	for _, s := range t.subList() {
		s.mu.Lock()
		r := s.cov.replicated
		s.mu.Unlock()
		if r {
			return true
		}
	}
	return false
}

// syncSubSenders starts and stops t's subscription senders to match the
// remote regions want (only while t has a replicated subscription or a
// deletion to ship).
func (m *replManager) syncSubSenders(t *topic, want []string) {
	ss := &t.subsync
	need := t.hasReplicated() || len(ss.liveTombs()) > 0
	ss.mu.Lock()
	if ss.closed {
		ss.mu.Unlock()
		return
	}
	var stop []*subSender
	for r, x := range ss.senders {
		if !need || !slices.Contains(want, r) {
			stop = append(stop, x)
			delete(ss.senders, r)
		}
	}
	if need {
		for _, r := range want {
			if _, ok := ss.senders[r]; ok {
				continue
			}
			if ss.senders == nil {
				ss.senders = map[string]*subSender{}
			}
			x := newSubSender(m, t, r)
			ss.senders[r] = x
			go x.run()
			t.log.Info("subscription sender started", "remote", r)
		}
	}
	ss.mu.Unlock()
	for _, x := range stop {
		x.stopWait()
	}
}

// subSender ships a topic's replicated subscriptions to one remote region.
type subSender struct {
	m      *replManager
	t      *topic
	remote string
	dialer *replicator.Dialer

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once

	// mu guards the fields below.
	mu        sync.Mutex
	subs      map[string]*sendState
	connected bool
	lastErr   string

	// sent counts the updates (and their bytes, as AckVector wire size)
	// shipped by kind since the sender started (tests; the metric
	// meridian_subscription_ack_replication_sent_*_total has the same).
	sent [3]struct{ updates, bytes atomic.Int64 }
}

// Kinds of shipped updates (subSender.sent, metric label kind).
const (
	shipFull = iota
	shipDelta
	shipDeleted
)

var shipKinds = [...]string{shipFull: "full", shipDelta: "delta", shipDeleted: "deleted"}

// sendState is what a sender knows of one subscription on its remote.
type sendState struct {
	// confirmed is what the remote is known to have (confirmed requests
	// joined with what it sent us), at reset epoch cEpoch/cRegion.
	confirmed ackVector
	cEpoch    int64
	cRegion   string
	// sent is confirmed joined with what the requests in flight carry, at
	// reset epoch sEpoch/sRegion: the base of the next delta (nil: ship
	// the whole vector). lastFull is when the whole vector was last
	// shipped (or found held by the remote) on this stream.
	sent     ackVector
	sEpoch   int64
	sRegion  string
	lastFull time.Time
	// sentVer is the subscription's cover version last shipped on this
	// stream (-1: ship it again); confVer the last version the remote is
	// known to have (the lag counts from the first change after it).
	sentVer int64
	confVer int64
	// tombAcked: the remote confirmed the deletion.
	tombAcked bool
}

func newSubSender(m *replManager, t *topic, remote string) *subSender {
	x := &subSender{m: m, t: t, remote: remote, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		subs: map[string]*sendState{}}
	x.dialer = &replicator.Dialer{Pool: m.pool, Topic: t.name.String(), Source: m.s.cfg.Region, Target: remote,
		Endpoints: func(ctx context.Context) ([]string, error) {
			rec, err := m.s.RegionInfo(ctx, remote)
			if err != nil {
				return nil, err
			}
			return rec.Endpoints(), nil
		}}
	return x
}

// wakeup asks the sender for a flush (non-blocking).
func (x *subSender) wakeup() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

func (x *subSender) stopWait() {
	x.once.Do(func() { close(x.stop) })
	<-x.done
}

func (x *subSender) stopped() bool {
	select {
	case <-x.stop:
		return true
	default:
		return false
	}
}

func (x *subSender) run() {
	defer close(x.done)
	backoff := 100 * time.Millisecond
	for !x.stopped() {
		start := time.Now()
		err := x.session()
		x.mu.Lock()
		x.connected = false
		if err != nil {
			x.lastErr = err.Error()
		}
		x.mu.Unlock()
		if err != nil && !x.stopped() {
			x.t.log.Debug("subscription sync session ended", "remote", x.remote, "err", err)
		}
		if time.Since(start) > 5*time.Second {
			backoff = 100 * time.Millisecond
		}
		select {
		case <-x.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, x.m.cfg.MaxBackoff)
	}
}

// sentItem is one update of a request in flight.
type sentItem struct {
	name    string
	ver     int64
	v       ackVector // the vector shipped: whole, or a delta
	full    bool
	epoch   int64
	region  string
	deleted bool
}

// count records shipped updates (metrics and subSender.sent).
func (x *subSender) count(items []sentItem, ups []*clientv1.SubscriptionUpdate) {
	m := x.m.s.metrics
	for i, it := range items {
		kind := shipDelta
		switch {
		case it.deleted:
			kind = shipDeleted
		case it.full:
			kind = shipFull
		}
		n := proto.Size(ups[i].GetVector())
		x.sent[kind].updates.Add(1)
		x.sent[kind].bytes.Add(int64(n))
		if m != nil {
			m.subSyncSentUpds.WithLabelValues(x.remote, shipKinds[kind]).Inc()
			m.subSyncSentBytes.WithLabelValues(x.remote, shipKinds[kind]).Add(float64(n))
		}
	}
}

type syncStream = grpc.BidiStreamingClient[clientv1.SubscriptionSyncRequest, clientv1.SubscriptionSyncResponse]

// session runs one stream until it fails or the sender stops.
func (x *subSender) session() error {
	ctx, cancel := context.WithCancel(x.m.base)
	defer cancel()
	go func() {
		select {
		case <-x.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var st syncStream
	err := x.dialer.Dial(ctx, func(ctx context.Context, cc grpc.ClientConnInterface, timeout time.Duration) error {
		s, err := clientv1.NewReplicationClient(cc).ReplicateSubscriptions(ctx)
		if err != nil {
			return err
		}
		if err := s.Send(&clientv1.SubscriptionSyncRequest{Kind: &clientv1.SubscriptionSyncRequest_Open{Open: &clientv1.SubscriptionSyncOpen{
			Topic: x.t.name.String(), SourceRegion: x.m.s.cfg.Region, TargetRegion: x.remote}}}); err != nil {
			return err
		}
		r, err := replicator.RecvWithin(ctx, timeout, s.Recv)
		if err != nil {
			return err
		}
		if r.GetOpened() == nil {
			return fmt.Errorf("%w: first answer of the subscription stream is not opened", ErrUnavailable)
		}
		st = s
		return nil
	})
	if err != nil {
		return err
	}
	// A new stream: the receiver may have lost what it had not persisted;
	// ship everything again.
	x.mu.Lock()
	x.connected = true
	x.lastErr = ""
	for _, s := range x.subs {
		s.sentVer = -1
		s.confirmed = nil
		s.sent = nil
		s.tombAcked = false
	}
	x.mu.Unlock()
	acks := make(chan *clientv1.SubscriptionSyncAck, 64)
	recvErr := make(chan error, 1)
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			a := r.GetAck()
			if a == nil {
				recvErr <- fmt.Errorf("%w: subscription stream answer is not an ack", ErrUnavailable)
				return
			}
			select {
			case acks <- a:
			case <-ctx.Done():
				return
			}
		}
	}()
	inflight := map[int64][]sentItem{}
	sentAt := map[int64]time.Time{}
	var reqID int64
	send := func(items []sentItem, ups []*clientv1.SubscriptionUpdate) error {
		reqID++
		inflight[reqID] = items
		sentAt[reqID] = time.Now()
		x.count(items, ups)
		return st.Send(&clientv1.SubscriptionSyncRequest{Kind: &clientv1.SubscriptionSyncRequest_Updates{Updates: &clientv1.SubscriptionUpdates{
			RequestId: reqID, Updates: ups}}})
	}
	flush := func() error {
		for {
			items, ups := x.collect()
			if len(items) == 0 {
				return nil
			}
			if err := send(items, ups); err != nil {
				return err
			}
		}
	}
	probe := time.NewTicker(x.m.cfg.Keepalive)
	defer probe.Stop()
	var timer <-chan time.Time
	if err := flush(); err != nil {
		return err
	}
	for {
		select {
		case <-x.stop:
			return nil
		case <-x.wake:
			if timer == nil {
				timer = time.After(subSyncFlush)
			}
		case <-timer:
			timer = nil
			if err := flush(); err != nil {
				return err
			}
		case a := <-acks:
			items, ok := inflight[a.GetRequestId()]
			if !ok {
				return fmt.Errorf("%w: ack for unknown request %d", ErrUnavailable, a.GetRequestId())
			}
			delete(inflight, a.GetRequestId())
			delete(sentAt, a.GetRequestId())
			x.confirm(items, a.GetError())
		case err := <-recvErr:
			return err
		case <-probe.C:
			for id, at := range sentAt {
				if time.Since(at) > x.m.cfg.AckTimeout {
					return fmt.Errorf("%w: request %d to region %s not answered within %v", ErrUnavailable, id, x.remote, x.m.cfg.AckTimeout)
				}
			}
			// Changes refused earlier are retried here, and an idle stream
			// sends an empty request so a cut link is noticed.
			if err := flush(); err != nil {
				return err
			}
			if len(inflight) == 0 {
				if err := send(nil, nil); err != nil {
					return err
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// collect builds one request: the replicated subscriptions whose vector
// the remote is not known to have, and the deletions it has not
// confirmed.
func (x *subSender) collect() ([]sentItem, []*clientv1.SubscriptionUpdate) {
	var items []sentItem
	var ups []*clientv1.SubscriptionUpdate
	ranges := 0
	now := time.Now()
	fullSync := x.m.s.cfg.Subscriptions.withDefaults().FullSyncInterval
	subs := x.t.subList()
	tombs := x.t.subsync.liveTombs()
	x.forget(subs, tombs)
	for _, s := range subs {
		if len(items) >= subSyncMaxUpdates || len(items) > 0 && ranges >= subSyncMaxRanges {
			break
		}
		x.mu.Lock()
		stt := x.subs[s.name]
		if stt == nil {
			stt = &sendState{sentVer: -1}
			x.subs[s.name] = stt
		}
		sentVer, confVer := stt.sentVer, stt.confVer
		periodic := !stt.lastFull.IsZero() && now.Sub(stt.lastFull) >= fullSync
		x.mu.Unlock()
		s.mu.Lock()
		if !s.cov.replicated || s.deleted {
			s.mu.Unlock()
			continue
		}
		ver := s.cov.ver
		// Skip what this stream shipped, or what the remote has — unless the
		// stream is new (sentVer -1), then everything goes again, or the
		// periodic whole vector is due.
		if (ver == sentVer || ver == confVer && sentVer != -1) && !periodic {
			s.mu.Unlock()
			continue
		}
		v := s.cov.v.clone()
		epoch, region, typ := s.cov.epoch, s.cov.region, s.cov.typ
		s.mu.Unlock()
		x.mu.Lock()
		sameEpoch := stt.confirmed != nil && stt.cEpoch == epoch && stt.cRegion == region
		if sameEpoch && !periodic && stt.confirmed.contains(v) {
			// The remote has it already (it sent it to us, or confirmed it).
			stt.confVer = max(stt.confVer, ver)
			stt.sentVer = ver
			if stt.lastFull.IsZero() {
				stt.lastFull = now
			}
			x.mu.Unlock()
			continue
		}
		if ver == stt.sentVer && !periodic {
			x.mu.Unlock()
			continue // shipped, not confirmed yet
		}
		full := periodic || stt.sent == nil || stt.sEpoch != epoch || stt.sRegion != region
		ship := v
		if !full {
			ship = v.minus(stt.sent)
			if ship.empty() {
				stt.sentVer = ver // all in flight already
				x.mu.Unlock()
				continue
			}
			stt.sent.joinLim(ship, noVecLimits)
		} else {
			stt.sent, stt.sEpoch, stt.sRegion, stt.lastFull = v.clone(), epoch, region, now
		}
		stt.sentVer = ver
		x.mu.Unlock()
		n, _ := ship.rangeCount()
		ranges += int(n) + len(ship)
		items = append(items, sentItem{name: s.name, ver: ver, v: ship, full: full, epoch: epoch, region: region})
		ups = append(ups, &clientv1.SubscriptionUpdate{Subscription: s.name, Type: typ, Vector: ship.toProto(), ResetEpoch: epoch, ResetRegion: region})
	}
	for name, tb := range tombs {
		if len(items) >= subSyncMaxUpdates {
			break
		}
		x.mu.Lock()
		stt := x.subs[name]
		if stt == nil {
			stt = &sendState{sentVer: -1}
			x.subs[name] = stt
		}
		if stt.tombAcked || stt.sentVer == -2 {
			x.mu.Unlock()
			continue
		}
		stt.sentVer = -2 // deletion in flight
		x.mu.Unlock()
		items = append(items, sentItem{name: name, deleted: true})
		ups = append(ups, &clientv1.SubscriptionUpdate{Subscription: name, Type: tb.typ, Deleted: true, Vector: &clientv1.AckVector{}})
	}
	return items, ups
}

// forget drops the state of subscriptions that are neither loaded nor
// recently deleted (bounded memory).
func (x *subSender) forget(subs []*subscription, tombs map[string]tomb) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.subs) <= len(subs)+len(tombs) {
		return
	}
	live := make(map[string]bool, len(subs))
	for _, s := range subs {
		live[s.name] = true
	}
	for name := range x.subs {
		if _, ok := tombs[name]; !ok && !live[name] {
			delete(x.subs, name)
		}
	}
}

// confirm records the remote's answer to a request.
func (x *subSender) confirm(items []sentItem, e *clientv1.Error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e != nil {
		x.lastErr = e.GetMessage()
		for _, it := range items {
			if stt := x.subs[it.name]; stt != nil {
				if stt.sentVer == it.ver || it.deleted {
					stt.sentVer = -1 // retried by the next flush or probe
				}
				// The next delta starts from what the remote confirmed.
				stt.sent, stt.sEpoch, stt.sRegion = stt.confirmed.clone(), stt.cEpoch, stt.cRegion
				if stt.confirmed == nil {
					stt.sent = nil
				}
			}
		}
		return
	}
	for _, it := range items {
		stt := x.subs[it.name]
		if stt == nil {
			continue
		}
		if it.deleted {
			stt.tombAcked = true
			continue
		}
		stt.learnLocked(it.v, it.epoch, it.region)
		stt.confVer = max(stt.confVer, it.ver)
	}
}

// learnLocked records that the remote has v at reset epoch (epoch, region).
func (stt *sendState) learnLocked(v ackVector, epoch int64, region string) {
	switch c := cmpEpoch(epoch, region, stt.cEpoch, stt.cRegion); {
	case c > 0 || stt.confirmed == nil:
		stt.confirmed = v.clone()
		stt.cEpoch, stt.cRegion = epoch, region
	case c == 0:
		stt.confirmed.joinLim(v, noVecLimits)
	}
	if stt.sent != nil && stt.sEpoch == epoch && stt.sRegion == region {
		stt.sent.joinLim(v, noVecLimits) // no need to ship it back
	}
}

// noteReceived records that the remote sent us v for subscription name: it
// has at least that, so it is not shipped back.
func (x *subSender) noteReceived(name string, v ackVector, epoch int64, region string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	stt := x.subs[name]
	if stt == nil {
		stt = &sendState{sentVer: -1}
		x.subs[name] = stt
	}
	stt.learnLocked(v, epoch, region)
}

// cmpEpoch orders reset epochs: by epoch, then region name.
func cmpEpoch(e1 int64, r1 string, e2 int64, r2 string) int {
	switch {
	case e1 != e2:
		if e1 < e2 {
			return -1
		}
		return 1
	case r1 < r2:
		return -1
	case r1 > r2:
		return 1
	}
	return 0
}

// ackReplicationStats reports subscription s's shipping state towards
// every remote region, and prunes the change marks every remote confirmed.
func (t *topic) ackReplicationStats(s *subscription) []*clientv1.AckReplicationStats {
	s.mu.Lock()
	if !s.cov.replicated {
		s.mu.Unlock()
		return nil
	}
	v := s.cov.v.clone()
	epoch, region := s.cov.epoch, s.cov.region
	marks := append([]verMark(nil), s.cov.marks...)
	untranslated := s.untranslatedLocked()
	s.mu.Unlock()
	var out []*clientv1.AckReplicationStats
	minConf := int64(-1)
	senders := t.subsync.senderList()
	have := map[string]bool{}
	for i, x := range senders {
		st, conf := x.stats(s.name, v, epoch, region, marks)
		// Acknowledgements not yet in the vector are not replicated either.
		st.PendingAcks += untranslated
		out = append(out, st)
		have[x.remote] = true
		if i == 0 || conf < minConf {
			minConf = conf
		}
	}
	// A remote whose sender has not started yet (the topic's replicators
	// run, its subscription sender follows at the next reconciliation) has
	// nothing.
	for _, r := range t.replicators.remotes() {
		if have[r] {
			continue
		}
		st := &clientv1.AckReplicationStats{Region: r, LastError: "subscription sender not started yet"}
		st.PendingRanges, st.PendingAcks = v.missingFrom(nil)
		st.PendingAcks += untranslated
		if at := lagSince(marks, 0); !at.IsZero() {
			st.LagSeconds = time.Since(at).Seconds()
		}
		out = append(out, st)
		minConf = 0
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Region < out[j].Region })
	if minConf > 0 {
		s.mu.Lock()
		s.cov.pruneMarks(minConf)
		s.mu.Unlock()
	}
	return out
}

// stats returns the sender's state for subscription name (vector v at
// reset epoch/region, change marks) and the version its remote confirmed.
func (x *subSender) stats(name string, v ackVector, epoch int64, region string, marks []verMark) (*clientv1.AckReplicationStats, int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	st := &clientv1.AckReplicationStats{Region: x.remote, Connected: x.connected, LastError: x.lastErr}
	stt := x.subs[name]
	var conf ackVector
	var confVer int64
	if stt != nil {
		confVer = stt.confVer
		if stt.cEpoch == epoch && stt.cRegion == region {
			conf = stt.confirmed
		}
	}
	st.PendingRanges, st.PendingAcks = v.missingFrom(conf)
	if at := lagSince(marks, confVer); !at.IsZero() {
		st.LagSeconds = time.Since(at).Seconds()
	}
	return st, confVer
}

// isConnected reports whether the sender's stream is open.
func (x *subSender) isConnected() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.connected
}

// removeTomb forgets a deletion (the subscription was created again here).
func (ss *subSync) removeTomb(name string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.tombs, name)
}

// missingFrom counts what v acknowledges and w does not: the maximal
// ranges of such origin_seq values and how many values they hold.
func (v ackVector) missingFrom(w ackVector) (ranges, acks int64) {
	for origin, o := range v {
		ivs := make([]seqRange, 0, len(o.Ranges)+1)
		if o.MD > 0 {
			ivs = append(ivs, seqRange{1, o.MD})
		}
		ivs = append(ivs, o.Ranges...)
		var have []seqRange
		if wo := w[origin]; wo != nil {
			if wo.MD > 0 {
				have = append(have, seqRange{1, wo.MD})
			}
			have = append(have, wo.Ranges...)
		}
		j := 0
		for _, iv := range ivs {
			cur := iv.First
			for j < len(have) && have[j].Last < cur {
				j++
			}
			for k := j; cur <= iv.Last; k++ {
				if k >= len(have) || have[k].First > iv.Last {
					ranges++
					acks += iv.Last - cur + 1
					break
				}
				if have[k].First > cur {
					ranges++
					acks += have[k].First - cur
				}
				cur = max(cur, have[k].Last+1)
			}
		}
	}
	return ranges, acks
}
