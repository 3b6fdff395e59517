//go:build unix

package run

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meridianmq/meridian/chaos/check"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region"
	"github.com/meridianmq/meridian/security"
)

// ErrIncomplete wraps every error that kept a run from completing (exit
// code 2), as opposed to a run whose checkers fail.
var ErrIncomplete = errors.New("chaos: the run could not be completed")

// Limits of a run.
const (
	MaxRate     = 100_000
	MaxTopics   = 16
	MaxDuration = 24 * time.Hour
	MaxSize     = 1 << 20
)

// Config configures one run.
type Config struct {
	// Control is the dev cluster's control address (cluster.json
	// "control"). Required.
	Control string
	// ControlToken is the control endpoint's bearer token (the content
	// of the cluster's control.token).
	ControlToken string
	// TLS and TokenFile are the credentials of a secured dev cluster
	// (cluster.json "ca" and "admin_token"; zero with --insecure), used
	// by every client of the run.
	TLS       security.TLSFiles
	TokenFile string
	// ID names the run (topics, payloads); default random.
	ID string
	// Seed seeds the schedule.
	Seed int64
	// Faults are catalogue kind names (KindsOf resolves families).
	Faults []string
	// Scenario, when set, replaces the seeded schedule (Faults unused).
	Scenario string
	// Duration is the length of the fault phase (default 5m; a scenario
	// takes its own).
	Duration time.Duration
	// Rate is messages per second over every producer (default 2000).
	Rate float64
	// Topics is how many replicated topics the workload uses (default 2).
	Topics int
	// Size is the payload size in bytes (default 100).
	Size int
	// Quiet bounds the wait after the heal for the backlogs to drain
	// (default 2m).
	Quiet time.Duration
	// Namespace holds the run's topics (default public/chaos-<id>; created,
	// replicated to every region).
	Namespace string
	// History receives history.jsonl (may be nil).
	History io.Writer
	// Progress receives the progress lines (may be nil).
	Progress io.Writer
	Logger   *slog.Logger
}

// secure adds the run's credentials to client options.
func (c *Config) secure(o client.Options) client.Options {
	o.TLSFiles, o.TokenFile = c.TLS, c.TokenFile
	return o
}

// Validate names the first bad field by its flag.
func (c *Config) Validate() error {
	switch {
	case c.Control == "":
		return errors.New("--cluster: no control address")
	case c.Duration < 0 || c.Duration > MaxDuration:
		return fmt.Errorf("--duration %v: must be in (0, %v]", c.Duration, MaxDuration)
	case c.Rate < 0 || c.Rate > MaxRate:
		return fmt.Errorf("--rate %v: must be in (0, %d]", c.Rate, MaxRate)
	case c.Topics < 0 || c.Topics > MaxTopics:
		return fmt.Errorf("--topics %d: must be in [1, %d]", c.Topics, MaxTopics)
	case c.Size < 0 || c.Size > MaxSize:
		return fmt.Errorf("--size %d: must be in [1, %d]", c.Size, MaxSize)
	case c.Quiet < 0 || c.Quiet > time.Hour:
		return fmt.Errorf("--quiet %v: must be in (0, 1h]", c.Quiet)
	}
	if c.Scenario != "" {
		if _, err := ScenarioByName(c.Scenario); err != nil {
			return err
		}
	}
	for _, f := range c.Faults {
		if _, ok := KindByName(f); !ok {
			return fmt.Errorf("--faults: %q is not a fault kind (meridian chaos list)", f)
		}
	}
	return nil
}

func (c *Config) withDefaults() {
	if c.Duration == 0 {
		c.Duration = 5 * time.Minute
	}
	if c.Rate == 0 {
		c.Rate = 2000
	}
	if c.Topics == 0 {
		c.Topics = 2
	}
	if c.Size == 0 {
		c.Size = 100
	}
	if c.Quiet == 0 {
		c.Quiet = 2 * time.Minute
	}
	if c.ID == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.ID = hex.EncodeToString(b[:])
	}
	if c.Namespace == "" {
		c.Namespace = "public/chaos-" + c.ID
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// FaultOutcome is one step as it happened.
type FaultOutcome struct {
	Step
	Detail    string    `json:"detail,omitempty"`
	Started   time.Time `json:"started"`
	Ended     time.Time `json:"ended"`
	InjectErr string    `json:"inject_err,omitempty"`
	HealErr   string    `json:"heal_err,omitempty"`
}

// Result is a completed run.
type Result struct {
	Run     check.Run
	History check.History
	Steps   []Step
	Faults  []FaultOutcome
	// Notes are things the report should say (heal errors, timeouts).
	Notes []string
}

// runner is one run in progress.
type runner struct {
	cfg     Config
	log     *slog.Logger
	cl      *cluster
	rec     *recorder
	admins  map[string]*client.Admin
	brokers map[string][]string
	topics  []string
	subs    []subSpec
	start   time.Time
	mu      sync.Mutex // guards notes, outcomes, active, backlog
	notes   []string
	outs    []FaultOutcome
	active  map[int]string
	backlog map[string]float64 // last sample of each backlog series
	opSubs  []string           // subscriptions operator actions created
}

func (r *runner) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (r *runner) progress(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "[chaos %s] "+format+"\n", append([]any{r.cfg.ID}, args...)...)
	}
}

// Run runs a chaos run against the dev cluster at cfg.Control: setup,
// workload, faults, heal, quiet period, read-back. The history is
// returned (and streamed to cfg.History); judging it is check.Check's
// job. An error wraps ErrIncomplete.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIncomplete, err)
	}
	r := &runner{cfg: cfg, log: cfg.Logger.With("chaos", cfg.ID), admins: map[string]*client.Admin{}, brokers: map[string][]string{},
		active: map[int]string{}, backlog: map[string]float64{}}
	res, err := r.run(ctx)
	if err != nil {
		return res, fmt.Errorf("%w: %w", ErrIncomplete, err)
	}
	return res, nil
}

// Schedule returns the steps a run of cfg on a cluster of shape s makes.
func Schedule(cfg Config, s Shape) ([]Step, time.Duration, error) {
	if cfg.Scenario != "" {
		sc, err := ScenarioByName(cfg.Scenario)
		if err != nil {
			return nil, 0, err
		}
		return sc.Steps(s), sc.Duration(s) + 5*time.Second, nil
	}
	steps, err := Plan(cfg.Seed, cfg.Faults, cfg.Duration, s)
	return steps, cfg.Duration, err
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	cfg := r.cfg
	cl, st, err := newCluster(ctx, cfg.Control, cfg.ControlToken, r.log)
	if err != nil {
		return nil, fmt.Errorf("dev cluster at %s: %w", cfg.Control, err)
	}
	r.cl = cl
	cl.notes = func(s string) { r.note("%s", s) }
	for _, p := range st.Processes {
		if p.State != "running" {
			return nil, fmt.Errorf("process %s is %s: start it first", p.Name, p.State)
		}
		if p.Role == region.RoleBroker {
			r.brokers[p.Region] = append(r.brokers[p.Region], p.GRPC)
		}
	}
	steps, phase, err := Schedule(cfg, cl.shape)
	if err != nil {
		return nil, err
	}
	r.rec = &recorder{counts: map[string]*counters{}}
	if cfg.History != nil {
		r.rec.w = check.NewWriter(cfg.History)
		defer func() { _ = r.rec.w.Flush() }()
	}
	for _, reg := range cl.shape.Regions {
		r.rec.counts[reg] = &counters{}
	}
	defer func() {
		for _, a := range r.admins {
			_ = a.Close(context.Background())
		}
	}()
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	// The kinds the run injects (a kind the cluster's shape cannot take,
	// such as a bridge between two regions, is left out).
	var kinds []string
	for _, s := range steps {
		if !slices.Contains(kinds, s.Kind) {
			kinds = append(kinds, s.Kind)
		}
	}
	slices.SortStableFunc(kinds, func(a, b string) int { return kindIndex(a) - kindIndex(b) })
	runRec := check.Run{ID: cfg.ID, Seed: cfg.Seed, Regions: cl.shape.Regions, Faults: kinds, Scenario: cfg.Scenario, Topics: r.topics, Quiet: cfg.Quiet}
	for _, s := range r.subs {
		runRec.Subscriptions = append(runRec.Subscriptions, s.Subscription)
	}
	r.rec.add(check.Record{Kind: check.KindRun, Run: &runRec})
	r.progress("seed %d, %d steps over %v, %.0f msg/s on %d topics in regions %s", cfg.Seed, len(steps), phase, cfg.Rate, len(r.topics), strings.Join(cl.shape.Regions, ","))
	for _, s := range steps {
		r.progress("  step %s", s)
	}

	w := &workload{secure: cfg.secure, id: cfg.ID, rate: cfg.Rate, size: cfg.Size, rec: r.rec, log: r.log, regions: cl.shape.Regions, brokers: r.brokers}
	defer w.close()
	if err := w.open(ctx, r.topics, r.subs); err != nil {
		return nil, err
	}
	cl.ops = &operator{admins: r.admins, rec: r.rec, w: w, id: cfg.ID, ns: cfg.Namespace, topics: r.topics, regions: cl.shape.Regions,
		addSub: func(name string) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.opSubs = append(r.opSubs, name)
		}}
	r.start = time.Now()
	w.start()
	sctx, stopSampling := context.WithCancel(context.Background())
	var sampling sync.WaitGroup
	sampling.Go(func() { r.sampleLoop(sctx, w) })
	defer func() {
		stopSampling()
		sampling.Wait()
	}()
	if err := r.waitFlowing(ctx); err != nil {
		return nil, err
	}

	// The faults. Whatever happens from here, everything is healed.
	r.rec.add(check.Record{Kind: check.KindPhase, Phase: "faults"})
	faultStart := time.Now()
	// A step waits for the heal of every step that ends before it starts
	// (a restart can take longer than planned): faults overlap only where
	// the schedule says so.
	done := make([]chan struct{}, len(steps))
	for i := range done {
		done[i] = make(chan struct{})
	}
	var steppers sync.WaitGroup
	for i, s := range steps {
		steppers.Go(func() {
			defer close(done[i])
			for j := range i {
				if steps[j].At+steps[j].For <= s.At {
					<-done[j]
				}
			}
			r.step(ctx, faultStart, i+1, s)
		})
	}
	steppers.Wait()
	if err := sleepUntil(ctx, faultStart.Add(phase)); err != nil {
		r.healEverything()
		return nil, err
	}
	r.rec.add(check.Record{Kind: check.KindPhase, Phase: "heal"})
	r.progress("healing everything")
	if err := r.healEverything(); err != nil {
		r.note("heal-all: %v", err)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	// The quiet period: producers stop, every send resolves, backlogs
	// drain.
	r.rec.add(check.Record{Kind: check.KindPhase, Phase: "quiet"})
	w.stopProducing()
	r.progress("producers stopped; waiting (at most %v) for every send to resolve and every backlog to drain", cfg.Quiet)
	if err := r.quiet(ctx, w); err != nil {
		return nil, err
	}
	stopSampling()
	sampling.Wait()
	w.close()

	r.rec.add(check.Record{Kind: check.KindPhase, Phase: "readback"})
	if err := r.readBack(ctx); err != nil {
		return nil, err
	}
	r.rec.add(check.Record{Kind: check.KindPhase, Phase: "done"})
	r.mu.Lock()
	defer r.mu.Unlock()
	slices.SortFunc(r.outs, func(a, b FaultOutcome) int { return a.Started.Compare(b.Started) })
	return &Result{Run: runRec, History: r.rec.history(), Steps: steps, Faults: r.outs, Notes: r.notes}, nil
}

// healEverything heals whatever may be left, with its own deadline (also
// when the run was cancelled).
func (r *runner) healEverything() error {
	ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	defer cancel()
	st, err := r.cl.status(ctx)
	if err != nil {
		return err
	}
	_ = st
	return r.cl.healAll(ctx, r.usesFamily(FamilyDisk), r.usesFamily(FamilyClock))
}

// usesFamily says whether the run's schedule has a fault of family f
// (only then does the cluster need, and is asked to clear, that control).
func (r *runner) usesFamily(f string) bool {
	steps, _, _ := Schedule(r.cfg, r.cl.shape)
	for _, s := range steps {
		if k, ok := KindByName(s.Kind); ok && k.Family == f {
			return true
		}
	}
	return false
}

// step injects one fault at its time and heals it at its end (or when
// the run is cancelled).
func (r *runner) step(ctx context.Context, t0 time.Time, id int, s Step) {
	if sleepUntil(ctx, t0.Add(s.At)) != nil {
		return
	}
	k, _ := KindByName(s.Kind)
	out := FaultOutcome{Step: s, Started: time.Now()}
	ictx, cancel := context.WithTimeout(context.WithValue(context.Background(), faultIDKey{}, id), faultTimeout)
	detail, err := k.injectFn(ictx, r.cl, s)
	cancel()
	out.Detail = detail
	if detail == "" {
		detail = s.Param
	}
	f := &check.Fault{ID: id, Kind: s.Kind, Targets: s.Targets, Detail: detail}
	if err != nil {
		out.InjectErr = err.Error()
		f.Err = err.Error()
		r.note("fault %d %s on %v: inject: %v", id, s.Kind, s.Targets, err)
		r.log.Warn("chaos: inject failed", "fault", id, "kind", s.Kind, "targets", s.Targets, "err", err)
	}
	r.rec.add(check.Record{T: out.Started, Kind: check.KindFaultStart, Fault: f})
	r.mu.Lock()
	r.active[id] = fmt.Sprintf("%s %s", s.Kind, strings.Join(s.Targets, ","))
	r.mu.Unlock()
	r.progress("fault %d: %s on %v (%s) for %v", id, s.Kind, s.Targets, f.Detail, s.For)
	_ = sleepUntil(ctx, out.Started.Add(s.For))
	hctx, cancel := context.WithTimeout(context.WithValue(context.Background(), faultIDKey{}, id), faultTimeout)
	herr := k.healFn(hctx, r.cl, s)
	cancel()
	out.Ended = time.Now()
	end := &check.Fault{ID: id, Kind: s.Kind, Targets: s.Targets, Detail: f.Detail}
	if herr != nil {
		out.HealErr = herr.Error()
		end.Err = herr.Error()
		r.note("fault %d %s on %v: heal: %v", id, s.Kind, s.Targets, herr)
		r.log.Warn("chaos: heal failed", "fault", id, "kind", s.Kind, "targets", s.Targets, "err", herr)
	}
	r.rec.add(check.Record{T: out.Ended, Kind: check.KindFaultEnd, Fault: end})
	r.progress("fault %d healed after %v", id, out.Ended.Sub(out.Started).Round(time.Millisecond))
	r.mu.Lock()
	delete(r.active, id)
	r.outs = append(r.outs, out)
	r.mu.Unlock()
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
