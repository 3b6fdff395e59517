//go:build unix

package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridianmq/meridian/chaos/check"
	"github.com/meridianmq/meridian/client"
)

// The workload: in every region, producers (one with a dedup name, one
// without, per topic) on a failover-enabled client, and consumers on a
// replicated and a local subscription of each type (exclusive, failover,
// shared; Key_Shared waits for issue 10) of every topic. Every send, completion and delivery is a
// history record.

// payloadPrefix starts every payload of a chaos run.
const payloadPrefix = "chaos "

// Payload is a traceable payload: run ID, origin region, producer and
// sequence, padded with dots to size bytes.
func Payload(runID, origin, producer string, seq int64, size int) []byte {
	b := fmt.Appendf(nil, "%s%s %s %s %d ", payloadPrefix, runID, origin, producer, seq)
	for len(b) < size {
		b = append(b, '.')
	}
	return b
}

// ParsePayload returns what Payload encoded; ok is false for anything
// else.
func ParsePayload(p []byte) (runID, origin, producer string, seq int64, ok bool) {
	s, found := strings.CutPrefix(string(p), payloadPrefix)
	if !found {
		return "", "", "", 0, false
	}
	f := strings.Fields(s)
	if len(f) < 4 {
		return "", "", "", 0, false
	}
	seq, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil || seq < 1 {
		return "", "", "", 0, false
	}
	return f[0], f[1], f[2], seq, true
}

// recorder appends records to the history in memory and to history.jsonl.
type recorder struct {
	w  *check.Writer // nil: memory only
	mu sync.Mutex    // guards recs
	h  []check.Record
	// per-region counters for the samples and the progress line.
	counts map[string]*counters
}

type counters struct{ sent, acked, delivered, errors atomic.Int64 }

func (r *recorder) add(rec check.Record) {
	if rec.T.IsZero() {
		rec.T = time.Now()
	}
	r.mu.Lock()
	r.h = append(r.h, rec)
	r.mu.Unlock()
	if r.w != nil {
		_ = r.w.Write(rec)
	}
}

func (r *recorder) count(reg string) *counters {
	if c, ok := r.counts[reg]; ok {
		return c
	}
	return &counters{} // a region not of the run: counted nowhere
}

func (r *recorder) history() check.History {
	r.mu.Lock()
	defer r.mu.Unlock()
	return check.History{Records: append([]check.Record(nil), r.h...)}
}

// subSpec is one subscription the workload consumes.
type subSpec struct {
	check.Subscription
	typ       client.SubscriptionType
	consumers int
}

// workload runs the producers and consumers.
type workload struct {
	// secure adds the cluster's credentials to client options.
	secure  func(client.Options) client.Options
	id      string
	rate    float64
	size    int
	rec     *recorder
	log     *slog.Logger
	regions []string
	brokers map[string][]string

	mu      sync.Mutex // guards clients and cons once the workload runs
	clients []*client.Client
	prods   []*prod
	cons    []*cons

	sendCtx   context.Context
	stopSends context.CancelFunc
	runCtx    context.Context
	stopRun   context.CancelFunc
	sending   sync.WaitGroup
	consuming sync.WaitGroup
	inflight  atomic.Int64
}

type prod struct {
	p      *client.Producer
	origin string
	name   string
	topic  string
	dedup  bool
}

type cons struct {
	co     *client.Consumer
	c      *client.Client
	home   string // the region of a pinned client ("" = ask the client)
	name   string
	sub    subSpec
	region func() string
	// limit, when > 0, ends the consumer after that many deliveries
	// (each acknowledged first): a consumer that read part of a backlog
	// and went away.
	limit int
}

func joinAddrs(a []string) string { return strings.Join(a, ",") }

// failoverClient opens a client whose primary is home and that fails
// over to the other regions.
func (w *workload) failoverClient(ctx context.Context, home string) (*client.Client, error) {
	regs := []client.RegionURL{{Name: home, URL: joinAddrs(w.brokers[home])}}
	for _, r := range w.regions {
		if r != home {
			regs = append(regs, client.RegionURL{Name: r, URL: joinAddrs(w.brokers[r])})
		}
	}
	opts := client.Options{Regions: regs, ConnectTimeout: 5 * time.Second, OperationTimeout: 10 * time.Second, MaxBackoff: time.Second,
		Logger:   w.log.With("component", "client", "home", home),
		Failover: client.FailoverOptions{Mode: client.FailoverAuto, ProbeInterval: 500 * time.Millisecond, FailedProbes: 4, SwitchBackDelay: 10 * time.Second},
		OnFailover: func(ev client.FailoverEvent) {
			w.log.Info("chaos: client failover", "home", home, "from", ev.From, "to", ev.To, "reason", ev.Reason)
		}}
	if len(regs) == 1 {
		opts = client.Options{URL: regs[0].URL, ConnectTimeout: 5 * time.Second, OperationTimeout: 10 * time.Second, MaxBackoff: time.Second, Logger: opts.Logger}
	}
	c, err := client.New(ctx, w.secure(opts))
	if err != nil {
		return nil, fmt.Errorf("client of region %s: %w", home, err)
	}
	w.addClient(c)
	return c, nil
}

func (w *workload) addClient(c *client.Client) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.clients = append(w.clients, c)
}

// controlledClient opens a client of every region with the controlled
// failover policy: it follows failover group group's target (first
// home).
func (w *workload) controlledClient(ctx context.Context, group, home string) (*client.Client, error) {
	regs := []client.RegionURL{{Name: home, URL: joinAddrs(w.brokers[home])}}
	for _, r := range w.regions {
		if r != home {
			regs = append(regs, client.RegionURL{Name: r, URL: joinAddrs(w.brokers[r])})
		}
	}
	c, err := client.New(ctx, w.secure(client.Options{Regions: regs, ConnectTimeout: 5 * time.Second, OperationTimeout: 10 * time.Second, MaxBackoff: time.Second,
		Logger:   w.log.With("component", "client", "group", group),
		Failover: client.FailoverOptions{Mode: client.FailoverControlled, Group: group, ProbeInterval: 500 * time.Millisecond},
		OnFailover: func(ev client.FailoverEvent) {
			w.log.Info("chaos: controlled failover", "group", group, "from", ev.From, "to", ev.To, "reason", ev.Reason)
		}}))
	if err != nil {
		return nil, fmt.Errorf("controlled client of group %s: %w", group, err)
	}
	w.addClient(c)
	return c, nil
}

// addConsumer starts consuming c (an operator action's consumer) until
// the workload closes.
func (w *workload) addConsumer(c *cons) {
	w.mu.Lock()
	w.cons = append(w.cons, c)
	w.mu.Unlock()
	w.consuming.Go(func() { w.consume(c) })
}

// regionClient opens a client of region r only.
func (w *workload) regionClient(ctx context.Context, r string) (*client.Client, error) {
	c, err := client.New(ctx, w.secure(client.Options{URL: joinAddrs(w.brokers[r]), ConnectTimeout: 5 * time.Second, OperationTimeout: 10 * time.Second,
		MaxBackoff: time.Second, Logger: w.log.With("component", "client", "region", r)}))
	if err != nil {
		return nil, fmt.Errorf("client of region %s: %w", r, err)
	}
	w.addClient(c)
	return c, nil
}

// open creates the producers and consumers.
func (w *workload) open(ctx context.Context, topics []string, subs []subSpec) error {
	w.runCtx, w.stopRun = context.WithCancel(context.Background())
	w.sendCtx, w.stopSends = context.WithCancel(w.runCtx)
	perProducer := w.rate / float64(2*len(topics)*len(w.regions))
	maxPending := int(min(max(perProducer*30, 1000), 100_000))
	for _, r := range w.regions {
		pc, err := w.failoverClient(ctx, r)
		if err != nil {
			return err
		}
		for ti, t := range topics {
			for _, dedup := range []bool{true, false} {
				name := fmt.Sprintf("%s-t%d-n", r, ti)
				opts := client.ProducerOptions{Topic: t, BatchingMaxDelay: 5 * time.Millisecond, MaxPendingMessages: maxPending,
					BlockIfQueueFull: true, SendTimeout: 30 * time.Second}
				if dedup {
					name = fmt.Sprintf("%s-t%d-d", r, ti)
					opts.Name = "chaos-" + w.id + "-" + name
				}
				p, err := pc.NewProducer(ctx, opts)
				if err != nil {
					return fmt.Errorf("producer %s on %s: %w", name, t, err)
				}
				w.prods = append(w.prods, &prod{p: p, origin: r, name: name, topic: t, dedup: dedup})
			}
		}
		// Consumers of replicated subscriptions follow the region's
		// failover client; local subscriptions stay in their region.
		var lc *client.Client
		for _, s := range subs {
			if s.Region != r {
				continue
			}
			c := pc
			home := ""
			if !s.Replicated {
				if lc == nil {
					if lc, err = w.regionClient(ctx, r); err != nil {
						return err
					}
				}
				c, home = lc, r
			} else if c, err = w.failoverClient(ctx, r); err != nil {
				return err
			}
			for i := range s.consumers {
				name := fmt.Sprintf("%s-%s-c%d", s.Name, s.Region, i)
				co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: s.Topic, Subscription: s.Name, Type: s.typ, InitialPosition: client.Earliest,
					Name: name, ReceiverQueueSize: 1000, Replicated: s.Replicated})
				if err != nil {
					return fmt.Errorf("subscribe %s on %s in %s: %w", s.Name, s.Topic, r, err)
				}
				cc := &cons{co: co, c: c, home: home, name: name, sub: s}
				if home != "" {
					cc.region = func() string { return home }
				} else {
					cc.region = c.ActiveRegion
				}
				w.cons = append(w.cons, cc)
			}
		}
	}
	return nil
}

func (w *workload) start() {
	rate := w.rate / float64(len(w.prods))
	for _, p := range w.prods {
		w.sending.Go(func() { w.produce(p, rate) })
	}
	for _, c := range w.cons {
		w.consuming.Go(func() { w.consume(c) })
	}
}

func (w *workload) produce(p *prod, rate float64) {
	start := time.Now()
	for seq := int64(1); ; seq++ {
		due := start.Add(time.Duration(float64(seq-1) / rate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-w.sendCtx.Done():
				return
			}
		} else if w.sendCtx.Err() != nil {
			return
		}
		reg := p.p.Region()
		base := check.Record{Origin: p.origin, Producer: p.name, Seq: seq, Topic: p.topic, Dedup: p.dedup, Key: fmt.Sprintf("k%d", seq%8)}
		send := base
		send.Kind, send.Region = check.KindSend, reg
		w.rec.add(send)
		w.rec.count(reg).sent.Add(1)
		w.inflight.Add(1)
		var once atomic.Bool
		p.p.SendAsync(w.runCtx, &client.Message{Key: base.Key, Payload: Payload(w.id, p.origin, p.name, seq, w.size)}, func(id client.MessageID, _ *client.Message, err error) {
			if once.Swap(true) {
				w.log.Error("chaos: the client called a send back twice", "producer", p.name, "seq", seq, "err", err)
				return
			}
			defer w.inflight.Add(-1)
			done := base
			done.Region = p.p.Region()
			if err == nil {
				done.Kind, done.MsgID = check.KindAck, id.String()
				w.rec.count(done.Region).acked.Add(1)
			} else {
				// Every error is an indefinite outcome: a send that failed
				// after a broker stored it (a cut before the answer) may be
				// stored.
				done.Kind, done.Err = check.KindTimeout, err.Error()
				w.rec.count(done.Region).errors.Add(1)
			}
			w.rec.add(done)
		})
	}
}

// ackers is the number of goroutines acknowledging one consumer's
// deliveries.
const ackers = 8

func (w *workload) consume(c *cons) {
	if c.limit > 0 {
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = c.co.Close(ctx)
		}()
	}
	delivered := 0
	// Ack waits for the broker to apply each acknowledgement (one round
	// trip): several acknowledgers keep up with the deliveries, so that a
	// topic move redelivers only what was really in flight.
	acks := make(chan client.MessageID, 10_000)
	var ackWG sync.WaitGroup
	for range ackers {
		ackWG.Go(func() {
			for id := range acks {
				ctx, cancel := context.WithTimeout(w.runCtx, 10*time.Second)
				_ = c.co.Ack(ctx, id)
				cancel()
			}
		})
	}
	defer func() {
		close(acks)
		ackWG.Wait()
	}()
	for w.runCtx.Err() == nil {
		ctx, cancel := context.WithTimeout(w.runCtx, 500*time.Millisecond)
		m, err := c.co.Receive(ctx)
		cancel()
		if err != nil {
			if errors.Is(err, client.ErrConsumerClosed) || errors.Is(err, client.ErrClientClosed) {
				return
			}
			continue
		}
		reg := c.region()
		rec := check.Record{Kind: check.KindDeliver, Region: reg, Topic: c.sub.Topic, Sub: c.sub.Name, SubType: c.sub.Type,
			Replicated: c.sub.Replicated, Consumer: c.name, MsgID: m.ID.String(), Redelivery: int(m.RedeliveryCount), Key: m.Key,
			StoredOrigin: m.OriginRegion, OriginID: m.OriginID}
		if id, origin, producer, seq, ok := ParsePayload(m.Payload); ok && id == w.id {
			rec.Origin, rec.Producer, rec.Seq = origin, producer, seq
		} else {
			rec.Unparsed, rec.Payload = true, string(m.Payload[:min(len(m.Payload), 64)])
		}
		w.rec.add(rec)
		w.rec.count(reg).delivered.Add(1)
		select {
		case acks <- m.ID:
		case <-w.runCtx.Done():
		}
		if delivered++; c.limit > 0 && delivered >= c.limit {
			return
		}
	}
}

// stopProducing stops new sends and waits for the producer loops.
func (w *workload) stopProducing() {
	w.stopSends()
	w.sending.Wait()
}

// close ends the consumers and closes every client.
func (w *workload) close() {
	if w.stopRun != nil {
		w.stopSends()
		w.stopRun()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.mu.Lock()
	clients := slices.Clone(w.clients)
	w.mu.Unlock()
	for _, c := range clients {
		_ = c.Close(ctx)
	}
	w.sending.Wait()
	w.consuming.Wait()
}
