//go:build unix

package drill

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/meridianmq/meridian/chaos"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region"
)

// Result is a finished drill: its report and the history it came from.
type Result struct {
	Report  Report
	History History
}

// ErrSetup wraps every error that kept a drill from running (as opposed to
// a drill that ran and lost messages, which is a Report with Lost > 0).
var ErrSetup = errors.New("drill: could not run")

// clusterDir returns the directory of a --cluster value (cluster.json or
// its directory).
func clusterDir(p string) string {
	if strings.HasSuffix(p, ".json") {
		return filepath.Dir(p)
	}
	return p
}

// newID returns a short random drill ID.
func newID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// run is one drill in progress.
type run struct {
	cfg Config
	log *slog.Logger
	ctl *region.DevControlClient
	// info is the cluster file: its credentials apply to every client.
	info  region.DevClusterInfo
	st    region.DevStatus
	rec   *Recorder
	topic string
	sub   string
	// brokers: gRPC addresses of each region's brokers.
	brokers map[string][]string
	// proxies: the clients' path to From's brokers (cut-links), by broker
	// address.
	// adminFrom, adminTo: admin clients of each region (setup, probes,
	// the operator's switch).
	adminFrom, adminTo *client.Admin
	net                *chaos.Network
	proxies            map[string]string
	start              time.Time // the workload's start
	notes              []string
	mu                 sync.Mutex // guards notes
}

func (r *run) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// Run runs a drill against the dev cluster of cfg.Cluster. An error
// wrapping ErrSetup means the drill could not run (bad configuration,
// cluster unreachable, workload could not start); otherwise the Result's
// Report says what was measured, Lost included.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSetup, err)
	}
	if cfg.ID == "" {
		cfg.ID = newID()
	}
	r := &run{cfg: cfg, log: cfg.Logger.With("drill", cfg.ID), brokers: map[string][]string{}}
	res, err := r.run(ctx)
	if err != nil && !errors.Is(err, ErrSetup) {
		err = fmt.Errorf("%w: %w", ErrSetup, err)
	}
	return res, err
}

func (r *run) progress(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, format+"\n", args...)
	}
}

// clientOptions returns the workload client's options in ModeClient.
func (r *run) clientOptions() client.Options {
	cfg := r.cfg
	o := r.secure(client.Options{
		Regions:        []client.RegionURL{{Name: cfg.From, URL: joinAddrs(r.brokers[cfg.From])}, {Name: cfg.To, URL: joinAddrs(r.brokers[cfg.To])}},
		ConnectTimeout: 5 * time.Second, OperationTimeout: 10 * time.Second, MaxBackoff: time.Second,
		Logger: r.log.With("component", "client"),
		OnFailover: func(ev client.FailoverEvent) {
			r.rec.Event(Event{Kind: EventSwitch, At: ev.Switched, From: ev.From, To: ev.To, Reason: ev.Reason, Took: ev.Took})
			r.progress("[drill] client switched %s → %s (%s) in %v", ev.From, ev.To, ev.Reason, ev.Took.Round(time.Millisecond))
		},
	})
	if cfg.Kind == KindFailover {
		// No automatic return during the drill: the return trip is
		// `drill switchback`.
		o.Failover = client.FailoverOptions{Mode: client.FailoverAuto, ProbeInterval: cfg.ProbeInterval, FailedProbes: cfg.FailedProbes, SwitchBackDelay: -1}
	} else {
		o.Failover = client.FailoverOptions{Mode: client.FailoverControlled, ProbeInterval: cfg.ProbeInterval, Group: "drill-" + cfg.ID}
	}
	if r.proxies != nil {
		o.DialRewrite = func(addr string) string {
			if p, ok := r.proxies[addr]; ok {
				return p
			}
			return addr
		}
	}
	return o
}

// regionOptions returns a single-region client's options (ModeReconnect,
// observer).
func (r *run) regionOptions(reg string) client.Options {
	return r.secure(client.Options{URL: joinAddrs(r.brokers[reg]), ConnectTimeout: 5 * time.Second, OperationTimeout: 10 * time.Second,
		MaxBackoff: time.Second, Logger: r.log.With("component", "client", "region", reg)})
}

// secure adds the cluster's credentials (a secured dev cluster's CA and
// admin token, from cluster.json) to client options.
func (r *run) secure(o client.Options) client.Options {
	o.TLSFiles, o.TokenFile = r.info.Credentials()
	return o
}

func (r *run) run(ctx context.Context) (*Result, error) {
	cfg := r.cfg
	r.topic = fmt.Sprintf("%s/drill-%s", cfg.Namespace, cfg.ID)
	r.sub = "drill-" + cfg.ID
	adminFrom, adminTo, err := r.setup(ctx)
	if err != nil {
		return nil, err
	}
	r.adminFrom, r.adminTo = adminFrom, adminTo
	defer func() {
		_ = adminFrom.Close(context.Background())
		_ = adminTo.Close(context.Background())
	}()
	if cfg.Fault == FaultCutLinks {
		r.net = chaos.NewNetwork(r.log.With("component", "linkproxy"))
		defer r.net.Close()
		r.proxies = map[string]string{}
		for _, b := range r.brokers[cfg.From] {
			px, err := r.net.Proxy(clientsNode, cfg.From, "127.0.0.1:0", b)
			if err != nil {
				return nil, err
			}
			r.proxies[b] = px.Addr()
		}
	}
	spec := workloadSpec{drillID: cfg.ID, topic: r.topic, sub: r.sub, subType: client.Exclusive,
		producers: cfg.Producers, consumers: cfg.Consumers, rate: cfg.Rate, size: cfg.Size, log: r.log}
	if cfg.Consumers > 1 {
		spec.subType = client.Shared
	}
	subDesc, err := r.prepareSubscriptions(ctx, adminFrom, adminTo, &spec)
	if err != nil {
		return nil, err
	}
	r.progress("[drill %s] %s %s → %s, fault %s, topic %s, %.0f msg/s for %v", cfg.ID, cfg.Kind, cfg.From, cfg.To, cfg.Fault, r.topic, cfg.Rate, cfg.Duration)

	// The observer in To, subscribed before the first message.
	obsClient, err := client.New(ctx, r.regionOptions(cfg.To))
	if err != nil {
		return nil, fmt.Errorf("observer in %s: %w", cfg.To, err)
	}
	defer closeClient(obsClient)
	obsCons, err := obsClient.Subscribe(ctx, client.ConsumerOptions{Topic: r.topic, Subscription: r.sub + "-observer", InitialPosition: client.Earliest, ReceiverQueueSize: 5000})
	if err != nil {
		return nil, fmt.Errorf("observer in %s: %w", cfg.To, err)
	}

	// The workload's clients.
	cur, err := r.openWorkload(ctx, spec)
	if err != nil {
		return nil, err
	}
	clientDesc := r.describeClients()

	start := time.Now()
	r.start = start
	r.rec = NewRecorder(start, cfg.From, cfg.To)
	obs := startObserver(obsCons, r.rec, cfg.ID)
	w := newWorkload(spec, r.rec, cur)
	w.start()
	torn := false
	teardown := func() {
		if torn {
			return
		}
		torn = true
		w.stop()
		obs.stop()
		w.side().close(5 * time.Second)
	}
	defer teardown()
	progCtx, stopProg := context.WithCancel(ctx)
	defer stopProg()
	go r.progressLoop(progCtx, w)
	go r.sampleLoop(progCtx, 250*time.Millisecond)

	// Wait for the workload to flow end to end before the fault: a drill
	// whose replication never started measures nothing.
	if err := r.waitFlowing(ctx, start); err != nil {
		return nil, err
	}
	if err := sleepUntil(ctx, start.Add(cfg.FaultAfter)); err != nil {
		return nil, err
	}

	f := &fault{kind: cfg.Fault, region: cfg.From, ctl: r.ctl, log: r.log, net: r.net}
	// The fault is healed once, by whoever comes first: the heal at
	// --heal-after, or the drill's early end (an error, Ctrl-C). A drill
	// never leaves its fault behind.
	healOnce := sync.OnceValue(func() error {
		r.progress("[drill %s] healing %s in %s", cfg.ID, f.kind, f.region)
		hctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := f.heal(hctx); err != nil {
			return err
		}
		r.rec.Event(Event{Kind: EventHeal, At: time.Now(), Reason: f.kind})
		r.progress("[drill %s] healed", cfg.ID)
		return nil
	})
	healed := make(chan error, 1)
	var probeStop func()
	if cfg.Kind == KindFailover {
		r.progress("[drill %s] injecting %s in %s", cfg.ID, cfg.Fault, cfg.From)
		// A reading of the acknowledgements not yet replicated right
		// before the fault: the bound on the duplicates of the move.
		r.sampleOnce(ctx, time.Second)
		faultAt := time.Now()
		err := f.inject(ctx)
		r.rec.Event(Event{Kind: EventFault, At: faultAt, Took: time.Since(faultAt), Reason: cfg.Fault})
		defer func() { _ = healOnce() }()
		if err != nil {
			return nil, fmt.Errorf("inject %s: %w", cfg.Fault, err)
		}
		if cfg.Mode == ModeReconnect {
			probeStop = r.probeAndSwitch(w, adminFrom, spec)
			defer probeStop()
		}
		go func() {
			if sleepUntil(ctx, start.Add(cfg.HealAfter)) != nil {
				healed <- ctx.Err() // the deferred heal does it
				return
			}
			healed <- healOnce()
		}()
	} else {
		r.progress("[drill %s] switching %s → %s", cfg.ID, cfg.From, cfg.To)
		r.sampleOnce(ctx, time.Second)
		r.rec.Event(Event{Kind: EventSwitchCommand, At: time.Now(), From: cfg.From, To: cfg.To})
		if err := r.switchCommand(ctx, w, spec); err != nil {
			return nil, err
		}
		healed <- nil
	}

	if err := sleepUntil(ctx, start.Add(cfg.Duration)); err != nil {
		return nil, err
	}
	w.stopProducing()
	r.rec.Event(Event{Kind: EventStopSend, At: time.Now()})
	r.progress("[drill %s] producers stopped; waiting for the heal and the drain", cfg.ID)
	var healErr error
	select {
	case healErr = <-healed:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if probeStop != nil {
		probeStop() // idempotent: deferred too
	}
	if healErr != nil {
		r.note("heal failed: %v (the cluster may need `meridian dev start`)", healErr)
	}
	r.drain(ctx)
	end := time.Now()
	stopProg()
	teardown()
	if n := w.ackErrs.Load(); n > 0 {
		r.note("%d acknowledgements failed (their messages may be delivered again)", n)
	}
	if n := w.doubleCallbacks.Load(); n > 0 {
		r.note("the client called back %d sends a second time (a client bug: each SendAsync callback must run once)", n)
	}
	if n := w.foreign.Load(); n > 0 {
		r.note("%d deliveries were not this drill's messages", n)
	}
	h := r.rec.History(end)
	rep := Analyze(h)
	rep.Drill, rep.Kind, rep.Fault, rep.Rate = cfg.ID, cfg.Kind, cfg.Fault, cfg.Rate
	rep.ClientFailover, rep.Subscription = clientDesc, subDesc
	rep.Notes = append(rep.Notes, r.notes...)
	return &Result{Report: rep, History: h}, nil
}

// openWorkload opens the workload's producers and consumers in From:
// on one multi-region client (ModeClient) or on a client of From only
// (ModeReconnect).
func (r *run) openWorkload(ctx context.Context, spec workloadSpec) (*side, error) {
	cfg := r.cfg
	if cfg.Mode == ModeReconnect {
		c, err := client.New(ctx, r.regionOptions(cfg.From))
		if err != nil {
			return nil, fmt.Errorf("workload client in %s: %w", cfg.From, err)
		}
		s, err := openSide(ctx, c, spec, cfg.From)
		if err != nil {
			closeClient(c)
		}
		return s, err
	}
	c, err := client.New(ctx, r.clientOptions())
	if err != nil {
		return nil, fmt.Errorf("workload client: %w", err)
	}
	if got := c.ActiveRegion(); got != cfg.From {
		closeClient(c)
		return nil, fmt.Errorf("workload client started in region %s, not --from %s", got, cfg.From)
	}
	s, err := openSide(ctx, c, spec, "")
	if err != nil {
		closeClient(c)
	}
	return s, err
}

// describeClients says, for the report, what moves the workload.
func (r *run) describeClients() string {
	cfg := r.cfg
	switch {
	case cfg.Mode == ModeClient && cfg.Kind == KindFailover:
		return fmt.Sprintf("client failover (automatic: probe every %v, switch after %d failed probes)", cfg.ProbeInterval, cfg.FailedProbes)
	case cfg.Mode == ModeClient:
		return fmt.Sprintf("client failover (controlled: failover group drill-%s, target set by an admin call, polled every %v)", cfg.ID, cfg.ProbeInterval)
	case cfg.Kind == KindFailover:
		return fmt.Sprintf("drill-managed reconnect (the drill probes %s every %v and after %d failed probes closes the clients and opens new ones in %s)", cfg.From, cfg.ProbeInterval, cfg.FailedProbes, cfg.To)
	}
	return "drill-managed reconnect (at the switch command the drill closes the clients and opens new ones)"
}

// waitFlowing waits until a message went through the consumers and
// reached To (bounded: replication may take a while to start).
func (r *run) waitFlowing(ctx context.Context, start time.Time) error {
	deadline := start.Add(max(r.cfg.FaultAfter, 60*time.Second))
	for {
		_, acked, delivered, observed := r.rec.Counts()
		if acked > 0 && delivered > 0 && observed > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the workload does not flow after %v: %d acknowledged, %d delivered, %d seen in %s (is replication %s→%s working?)",
				time.Since(start).Round(time.Second), acked, delivered, observed, r.cfg.To, r.cfg.From, r.cfg.To)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// drain waits until every acknowledged message was delivered and seen in
// To, every send resolved, or the drain timeout passed.
func (r *run) drain(ctx context.Context) {
	deadline := time.Now().Add(r.cfg.DrainTimeout)
	for {
		sent, acked, delivered, observed := r.rec.Counts()
		// Every message sent must be acknowledged (the workload resends
		// until then), delivered and seen in To.
		if sent == acked && acked == delivered && acked == observed {
			return
		}
		if time.Now().After(deadline) {
			r.note("drain timeout %v: %d sent, %d acknowledged, %d delivered, %d seen in %s", r.cfg.DrainTimeout, sent, acked, delivered, observed, r.cfg.To)
			return
		}
		if sleepCtx(ctx, 200*time.Millisecond) != nil {
			return
		}
	}
}

func (r *run) progressLoop(ctx context.Context, w *workload) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			sent, acked, delivered, observed := r.rec.Counts()
			r.progress("[drill %s %3.0fs] region %s: sent %d, acknowledged %d, delivered %d, seen in %s %d, unresolved %d",
				r.cfg.ID, time.Since(r.start).Seconds(), w.side().regionNow(), sent, acked, delivered, r.cfg.To, observed, sent-acked)
		}
	}
}

func closeClient(c *client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func sleepUntil(ctx context.Context, t time.Time) error {
	if d := time.Until(t); d > 0 {
		return sleepCtx(ctx, d)
	}
	return ctx.Err()
}
