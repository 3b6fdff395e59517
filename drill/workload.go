package drill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridianmq/meridian/client"
)

// The workload: producers sending unique payloads at a fixed rate,
// consumers of the drill's subscription, and an observer in the target
// region. Every callback lands in the Recorder.

// retryDelay spaces the resends of a failed message: a dead producer
// fails sends at once, and the resend must not spin on it.
const retryDelay = 200 * time.Millisecond

// side is the workload's clients in one region (ModeReconnect) or its one
// multi-region client (ModeClient).
type side struct {
	c     *client.Client
	prods []*client.Producer
	cons  []*client.Consumer
	// region is fixed for ModeReconnect; "" means ask c.ActiveRegion().
	region string
}

func (s *side) regionNow() string {
	if s.region != "" {
		return s.region
	}
	return s.c.ActiveRegion()
}

// close closes the side's client (and with it its producers and
// consumers) within timeout.
func (s *side) close(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, p := range s.prods {
		_ = p.Close(ctx)
	}
	for _, co := range s.cons {
		_ = co.Close(ctx)
	}
	_ = s.c.Close(ctx)
}

// workloadSpec names what the workload uses.
type workloadSpec struct {
	drillID    string
	topic      string
	sub        string
	subType    client.SubscriptionType
	replicated bool // the workload's subscription is replicated
	producers  int
	consumers  int
	rate       float64
	size       int
	log        *slog.Logger
}

type workload struct {
	spec workloadSpec
	rec  *Recorder

	mu  sync.Mutex // guards cur
	cur *side

	// runCtx ends when the workload is torn down; sendCtx when the
	// producers stop sending new messages (resends go on).
	runCtx    context.Context
	stopRun   context.CancelFunc
	sendCtx   context.Context
	stopSends context.CancelFunc

	// doubleCallbacks counts send callbacks the client made more than
	// once for one SendAsync (each must be called exactly once).
	doubleCallbacks atomic.Int64
	ackErrs         atomic.Int64
	foreign         atomic.Int64 // deliveries that were not this drill's messages
	wg              sync.WaitGroup
	// producing counts the producers' loops still running: a loop that
	// passed its stop check records one more send.
	producing sync.WaitGroup
}

func newWorkload(spec workloadSpec, rec *Recorder, s *side) *workload {
	w := &workload{spec: spec, rec: rec, cur: s}
	w.runCtx, w.stopRun = context.WithCancel(context.Background())
	w.sendCtx, w.stopSends = context.WithCancel(w.runCtx)
	return w
}

func (w *workload) side() *side {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

// replace makes s the current side and returns the previous one.
func (w *workload) replace(s *side) *side {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.cur
	w.cur = s
	return old
}

// openSide opens the producers and consumers of the workload on c.
func openSide(ctx context.Context, c *client.Client, spec workloadSpec, region string) (*side, error) {
	s := &side{c: c, region: region}
	maxPending := int(min(max(spec.rate/float64(spec.producers)*30, 1000), 200_000))
	for i := range spec.producers {
		p, err := c.NewProducer(ctx, client.ProducerOptions{
			Topic: spec.topic, Name: fmt.Sprintf("drill-%s-p%d", spec.drillID, i),
			BatchingMaxDelay: 5 * time.Millisecond, MaxPendingMessages: maxPending, BlockIfQueueFull: true,
			// A send is given up (and resent by the drill) after 30s:
			// longer than any failover the drill expects.
			SendTimeout: 30 * time.Second,
		})
		if err != nil {
			s.close(5 * time.Second)
			return nil, fmt.Errorf("drill: open producer %d on %s: %w", i, spec.topic, err)
		}
		s.prods = append(s.prods, p)
	}
	for i := range spec.consumers {
		co, err := c.Subscribe(ctx, consumerOptions(spec, fmt.Sprintf("drill-%s-c%d", spec.drillID, i)))
		if err != nil {
			s.close(5 * time.Second)
			return nil, fmt.Errorf("drill: subscribe %s on %s: %w", spec.sub, spec.topic, err)
		}
		s.cons = append(s.cons, co)
	}
	return s, nil
}

// consumerOptions are the workload consumers' options.
func consumerOptions(spec workloadSpec, name string) client.ConsumerOptions {
	return client.ConsumerOptions{Topic: spec.topic, Subscription: spec.sub, Type: spec.subType,
		InitialPosition: client.Earliest, Name: name, ReceiverQueueSize: 1000, Replicated: spec.replicated}
}

// start runs the producers' and consumers' loops.
func (w *workload) start() {
	for i := range w.spec.producers {
		w.producing.Add(1)
		w.wg.Go(func() {
			defer w.producing.Done()
			w.produce(i)
		})
	}
	for j := range w.spec.consumers {
		w.wg.Go(func() { w.consume(j) })
	}
}

// stopProducing stops the producers from sending new messages (resends go
// on) and returns once every producer loop has recorded its last send, so
// that the drain counts every message sent.
func (w *workload) stopProducing() {
	w.stopSends()
	w.producing.Wait()
}

// produce sends producer i's messages at its share of the rate until the
// producers stop.
func (w *workload) produce(i int) {
	rate := w.spec.rate / float64(w.spec.producers)
	start := time.Now()
	for seq := int64(0); ; seq++ {
		due := start.Add(time.Duration(float64(seq) / rate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-w.sendCtx.Done():
				return
			}
		} else if w.sendCtx.Err() != nil {
			return
		}
		id := MsgID{Producer: i, Seq: seq}
		now := time.Now()
		w.rec.Sent(id, now)
		w.send(id, now)
	}
}

// send hands id to the current producer; a failure schedules a resend
// until the workload is torn down.
func (w *workload) send(id MsgID, sent time.Time) {
	s := w.side()
	p := s.prods[id.Producer]
	m := &client.Message{Payload: Payload(w.spec.drillID, id, sent, w.spec.size)}
	var called atomic.Bool
	p.SendAsync(w.runCtx, m, func(_ client.MessageID, m *client.Message, err error) {
		if called.Swap(true) {
			w.doubleCallbacks.Add(1)
			w.spec.log.Warn("drill: the client called a send back twice", "msg", id, "err", err)
			return
		}
		if err == nil {
			w.rec.Acked(id, time.Now(), p.Region(), m.Duplicate)
			return
		}
		w.rec.Failed(id, err)
		if w.runCtx.Err() != nil {
			return
		}
		w.spec.log.Debug("send failed: resending", "msg", id, "err", err)
		time.AfterFunc(retryDelay, func() {
			if w.runCtx.Err() != nil {
				return
			}
			w.rec.Sent(id, sent)
			w.send(id, sent)
		})
	})
}

// consume receives on consumer j of the current side and acknowledges
// every message, until the workload is torn down.
func (w *workload) consume(j int) {
	type ack struct {
		co *client.Consumer
		id client.MessageID
	}
	acks := make(chan ack, 10_000)
	var ackWG sync.WaitGroup
	ackWG.Go(func() {
		for a := range acks {
			ctx, cancel := context.WithTimeout(w.runCtx, 10*time.Second)
			if err := a.co.Ack(ctx, a.id); err != nil && w.runCtx.Err() == nil {
				w.ackErrs.Add(1)
			}
			cancel()
		}
	})
	defer func() {
		close(acks)
		ackWG.Wait()
	}()
	for w.runCtx.Err() == nil {
		s := w.side()
		co := s.cons[j]
		ctx, cancel := context.WithTimeout(w.runCtx, 200*time.Millisecond)
		m, err := co.Receive(ctx)
		cancel()
		if err != nil {
			if errors.Is(err, client.ErrConsumerClosed) {
				// Replaced by a switch (ModeReconnect): the next turn uses
				// the new side.
				select {
				case <-time.After(50 * time.Millisecond):
				case <-w.runCtx.Done():
				}
			}
			continue
		}
		now := time.Now()
		drillID, id, _, ok := ParsePayload(m.Payload)
		if ok && drillID == w.spec.drillID {
			w.rec.Delivered(id, now, s.regionNow())
		} else {
			w.foreign.Add(1)
		}
		acks <- ack{co, m.ID}
	}
}

// stop ends the workload: sends, resends, consumers.
func (w *workload) stop() {
	w.stopSends()
	w.stopRun()
	w.wg.Wait()
}

// observer reads the drill's topic in the target region on a
// subscription of its own and records when each message got there.
type observer struct {
	rec     *Recorder
	drillID string
	co      *client.Consumer
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
}

func startObserver(co *client.Consumer, rec *Recorder, drillID string) *observer {
	o := &observer{rec: rec, drillID: drillID, co: co, done: make(chan struct{})}
	o.ctx, o.cancel = context.WithCancel(context.Background())
	go o.run()
	return o
}

func (o *observer) run() {
	defer close(o.done)
	// Acknowledgements go on their own goroutine (an entry's ack waits a
	// round trip): the receive loop, which timestamps arrivals, must not
	// fall behind.
	acks := make(chan client.MessageID, 10_000)
	var ackWG sync.WaitGroup
	ackWG.Go(func() {
		for id := range acks {
			actx, cancel := context.WithTimeout(o.ctx, 10*time.Second)
			_ = o.co.Ack(actx, id)
			cancel()
		}
	})
	defer func() {
		close(acks)
		ackWG.Wait()
	}()
	for o.ctx.Err() == nil {
		m, err := o.co.Receive(o.ctx)
		if err != nil {
			if errors.Is(err, client.ErrConsumerClosed) {
				return
			}
			continue
		}
		if drillID, id, _, ok := ParsePayload(m.Payload); ok && drillID == o.drillID {
			o.rec.Observed(id, time.Now())
		}
		acks <- m.ID
	}
}

func (o *observer) stop() {
	o.cancel()
	<-o.done
}

// joinAddrs joins broker addresses as a client URL.
func joinAddrs(addrs []string) string { return strings.Join(addrs, ",") }
