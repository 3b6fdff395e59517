package check

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Checker names, in the order Check runs them and reports them.
const (
	CheckLost       = "lost"
	CheckUnexpected = "unexpected"
	CheckDuplicated = "duplicated"
	CheckOrder      = "order"
	CheckDivergence = "divergence"
	CheckStuck      = "stuck"
	// CheckCompleteness is subscription completeness (completeness.go).
	CheckCompleteness = "completeness"
)

// Checkers lists every checker, in report order.
var Checkers = []string{CheckLost, CheckUnexpected, CheckDuplicated, CheckOrder, CheckDivergence, CheckStuck, CheckCompleteness}

// MaxExamples bounds Result.Examples.
const MaxExamples = 10

// DefaultStuckSamples is Options.StuckSamples' default: with one sample a
// second, a backlog that has not gone down in 5 s at the end of the quiet
// period is stuck.
const DefaultStuckSamples = 5

// Options selects and tunes the checkers. The zero value runs them all
// with their defaults.
type Options struct {
	// Checkers names the checkers to run (see Checkers); empty: all.
	Checkers []string
	// BoundDuplicates makes duplicated fail when a subscription's
	// duplicate deliveries exceed MaxDuplicates (default: duplicate
	// deliveries are allowed, at-least-once, and only counted).
	BoundDuplicates bool
	MaxDuplicates   int
	// StuckSamples is how many of a backlog series' last samples must not
	// go down for it to be stuck (default DefaultStuckSamples, minimum 2).
	StuckSamples int
}

// Validate reports a bad option, naming the field.
func (o Options) Validate() error {
	for i, c := range o.Checkers {
		if !slices.Contains(Checkers, c) {
			return fmt.Errorf("check: checkers[%d] %q: unknown checker (one of %s)", i, c, strings.Join(Checkers, ", "))
		}
	}
	if o.MaxDuplicates < 0 {
		return fmt.Errorf("check: max_duplicates %d: must be >= 0", o.MaxDuplicates)
	}
	if o.StuckSamples < 0 || o.StuckSamples == 1 {
		return fmt.Errorf("check: stuck_samples %d: must be 0 (default %d) or >= 2", o.StuckSamples, DefaultStuckSamples)
	}
	return nil
}

func (o Options) enabled(name string) bool {
	return len(o.Checkers) == 0 || slices.Contains(o.Checkers, name)
}

// Result is one checker's verdict.
type Result struct {
	Name string `json:"name"`
	Pass bool   `json:"pass"`
	// Count is the number of anomalies the checker counts (for duplicated
	// with no bound: the duplicate deliveries, which do not fail it).
	Count int `json:"count"`
	// Detail says what was counted, per region or subscription.
	Detail string `json:"detail"`
	// Examples are up to MaxExamples anomalies, one line each.
	Examples []string `json:"examples,omitempty"`
}

// Stats are the history's key counts.
type Stats struct {
	// Sent counts send invocations; Acked, Failed and Timeouts their
	// completions; Unanswered the sends with no completion at all
	// (indefinite, like a timeout).
	Sent       int `json:"sent"`
	Acked      int `json:"acked"`
	Failed     int `json:"failed"`
	Timeouts   int `json:"timeouts"`
	Unanswered int `json:"unanswered"`
	// IndefiniteStored counts timed-out or unanswered sends found stored
	// (read back or delivered somewhere): not an anomaly.
	IndefiniteStored int `json:"indefinite_stored"`
	// AckedPerRegion splits Acked by the acknowledging region.
	AckedPerRegion map[string]int `json:"acked_per_region,omitempty"`
	// Deliveries counts every delivery; Delivered the distinct messages
	// delivered at least once anywhere; Duplicates the deliveries beyond
	// the first per subscription.
	Deliveries int `json:"deliveries"`
	Delivered  int `json:"delivered"`
	Duplicates int `json:"duplicates"`
	// ReadPerRegion counts the distinct messages of the run each region's
	// read-back found; StoredTwice the extra copies read back.
	ReadPerRegion map[string]int `json:"read_per_region,omitempty"`
	StoredTwice   int            `json:"stored_twice"`
	// Faults counts the injected faults; FaultErrors those whose inject
	// or heal failed.
	Faults      int `json:"faults"`
	FaultErrors int `json:"fault_errors"`
	// DurationMs spans the history's first to last record.
	DurationMs int64 `json:"duration_ms"`
}

// Verdict is the outcome of Check: Valid when every checker passed.
type Verdict struct {
	Run     *Run     `json:"run"`
	Valid   bool     `json:"valid"`
	Results []Result `json:"results"`
	Stats   Stats    `json:"stats"`
}

// Result returns the result of the named checker (ok false when it did
// not run).
func (v Verdict) Result(name string) (Result, bool) {
	for _, r := range v.Results {
		if r.Name == name {
			return r, true
		}
	}
	return Result{}, false
}

// Check runs the checkers opt selects on h. It is pure: the same history
// gives the same verdict. Options are assumed valid (see Options.Validate;
// unknown checker names are ignored).
func Check(h History, opt Options) Verdict {
	x := index(h)
	v := Verdict{Run: x.run, Valid: true, Stats: x.stats()}
	if opt.StuckSamples < 2 {
		opt.StuckSamples = DefaultStuckSamples
	}
	for _, c := range []struct {
		name string
		f    func(*hindex, Options) Result
	}{
		{CheckLost, checkLost},
		{CheckUnexpected, checkUnexpected},
		{CheckDuplicated, checkDuplicated},
		{CheckOrder, checkOrder},
		{CheckDivergence, checkDivergence},
		{CheckStuck, checkStuck},
		{CheckCompleteness, checkCompleteness},
	} {
		if !opt.enabled(c.name) {
			continue
		}
		r := c.f(x, opt)
		r.Name = c.name
		if len(r.Examples) > MaxExamples {
			r.Examples = r.Examples[:MaxExamples]
		}
		v.Valid = v.Valid && r.Pass
		v.Results = append(v.Results, r)
	}
	return v
}

// msgKey identifies a message of the run.
type msgKey struct {
	Origin, Producer string
	Seq              int64
}

func (k msgKey) String() string { return fmt.Sprintf("%s/%s#%d", k.Origin, k.Producer, k.Seq) }

func keyOf(r Record) msgKey { return msgKey{r.Origin, r.Producer, r.Seq} }

// copyKey identifies one stored copy of a message: the region whose log
// stored it and its ID there.
type copyKey struct {
	msg        msgKey
	origin, id string
}

// sendInfo is what the history says about one message's send.
type sendInfo struct {
	topic, key string
	dedup      bool
	// outcome is the completion kind ("" while none was recorded);
	// ackRegion the acknowledging region.
	outcome   Kind
	ackRegion string
	ackT      time.Time
	// sendT is the time of the send invocation.
	sendT time.Time
}

// subKey identifies a subscription as the deliveries name it: the
// consumer's region, the topic and the subscription's name.
type subKey struct{ Region, Topic, Sub string }

func (s subKey) String() string { return s.Region + ":" + s.Topic + ":" + s.Sub }

// hindex is a history indexed for the checkers.
type hindex struct {
	all     []Record
	run     *Run
	regions []string
	sends   map[msgKey]*sendInfo
	// sendOrder lists the sent messages in history order.
	sendOrder []msgKey
	// deliveries per subscription, in history order; subTypes the type
	// a subscription's deliveries name.
	deliveries map[subKey][]Record
	subTypes   map[subKey]string
	// subRepl marks the subscriptions whose deliveries say replicated.
	subRepl  map[subKey]bool
	subOrder []subKey
	// deliveredSet: the messages delivered to each subscription.
	deliveredSet map[subKey]map[msgKey]bool
	// deliveredIn: messages delivered in a region (any subscription).
	deliveredIn map[string]map[msgKey]bool
	// reads per region in history (= log) order.
	reads map[string][]Record
	// complete names the (region, topic) read-backs that ended with a
	// PhaseReadBackComplete record.
	complete  map[[2]string]bool
	readCount map[string]map[msgKey]int
	// copyCount counts each stored copy (StoredOrigin, OriginID) per
	// region's read-back; noCopyID marks the messages with a read that
	// does not name its copy.
	copyCount map[string]map[copyKey]int
	noCopyID  map[msgKey]bool
	copiesOf  map[msgKey]map[copyKey]bool
	// completions of messages never sent; unparsed payloads.
	orphanCompletions []Record
	unparsed          []Record
	faults            []faultSpan
	// ops are the operator actions in history order.
	ops         []Record
	delWins     *[]deleteWindow // deleteWindows, computed once
	samples     []Record
	phases      []Record
	first, last time.Time
}

// faultSpan is one fault from its start to its end record (end zero: it
// never ended).
type faultSpan struct {
	Fault
	start, end time.Time
}

func index(h History) *hindex {
	x := &hindex{
		sends:        map[msgKey]*sendInfo{},
		deliveries:   map[subKey][]Record{},
		subTypes:     map[subKey]string{},
		deliveredSet: map[subKey]map[msgKey]bool{},
		deliveredIn:  map[string]map[msgKey]bool{},
		reads:        map[string][]Record{},
		readCount:    map[string]map[msgKey]int{},
		copyCount:    map[string]map[copyKey]int{},
		noCopyID:     map[msgKey]bool{},
		copiesOf:     map[msgKey]map[copyKey]bool{},
	}
	seenRegion := map[string]bool{}
	var regions []string
	addRegion := func(r string) {
		if r != "" && !seenRegion[r] {
			seenRegion[r] = true
			regions = append(regions, r)
		}
	}
	faultIdx := map[int]int{}
	x.all = h.Records
	for _, r := range h.Records {
		if !r.T.IsZero() {
			if x.first.IsZero() || r.T.Before(x.first) {
				x.first = r.T
			}
			if r.T.After(x.last) {
				x.last = r.T
			}
		}
		switch r.Kind {
		case KindRun:
			if r.Run != nil && x.run == nil {
				x.run = r.Run
			}
		case KindSend:
			k := keyOf(r)
			if _, ok := x.sends[k]; !ok {
				x.sends[k] = &sendInfo{topic: r.Topic, key: r.Key, dedup: r.Dedup, sendT: r.T}
				x.sendOrder = append(x.sendOrder, k)
			}
		case KindAck, KindFail, KindTimeout:
			s, ok := x.sends[keyOf(r)]
			if !ok {
				x.orphanCompletions = append(x.orphanCompletions, r)
				continue
			}
			// An ack wins over an earlier timeout (a late answer); a later
			// fail or timeout never undoes an ack.
			if s.outcome != KindAck {
				s.outcome = r.Kind
				if r.Kind == KindAck {
					s.ackRegion, s.ackT = r.Region, r.T
					addRegion(r.Region)
				}
			}
		case KindDeliver:
			if r.Unparsed {
				x.unparsed = append(x.unparsed, r)
				continue
			}
			sk := subKey{r.Region, r.Topic, r.Sub}
			if _, ok := x.deliveries[sk]; !ok {
				x.subOrder = append(x.subOrder, sk)
				x.deliveredSet[sk] = map[msgKey]bool{}
			}
			x.deliveredSet[sk][keyOf(r)] = true
			x.deliveries[sk] = append(x.deliveries[sk], r)
			if r.SubType != "" {
				x.subTypes[sk] = r.SubType
			}
			if r.Replicated {
				if x.subRepl == nil {
					x.subRepl = map[subKey]bool{}
				}
				x.subRepl[sk] = true
			}
			if x.deliveredIn[r.Region] == nil {
				x.deliveredIn[r.Region] = map[msgKey]bool{}
			}
			x.deliveredIn[r.Region][keyOf(r)] = true
			addRegion(r.Region)
		case KindRead:
			if r.Unparsed {
				x.unparsed = append(x.unparsed, r)
				continue
			}
			x.reads[r.Region] = append(x.reads[r.Region], r)
			if x.readCount[r.Region] == nil {
				x.readCount[r.Region] = map[msgKey]int{}
			}
			x.readCount[r.Region][keyOf(r)]++
			if r.StoredOrigin == "" || r.OriginID == "" {
				x.noCopyID[keyOf(r)] = true
			} else {
				if x.copyCount[r.Region] == nil {
					x.copyCount[r.Region] = map[copyKey]int{}
				}
				ck := copyKey{keyOf(r), r.StoredOrigin, r.OriginID}
				x.copyCount[r.Region][ck]++
				if x.copiesOf[ck.msg] == nil {
					x.copiesOf[ck.msg] = map[copyKey]bool{}
				}
				x.copiesOf[ck.msg][ck] = true
			}
			addRegion(r.Region)
		case KindFaultStart:
			if r.Fault != nil {
				faultIdx[r.Fault.ID] = len(x.faults)
				x.faults = append(x.faults, faultSpan{Fault: *r.Fault, start: r.T})
			}
		case KindFaultEnd:
			if r.Fault != nil {
				if i, ok := faultIdx[r.Fault.ID]; ok {
					x.faults[i].end = r.T
					if r.Fault.Err != "" && x.faults[i].Err == "" {
						x.faults[i].Err = r.Fault.Err
					}
				}
			}
		case KindOp:
			if r.Op != nil {
				x.ops = append(x.ops, r)
			}
		case KindSample:
			if r.Sample != nil {
				x.samples = append(x.samples, r)
			}
		case KindPhase:
			if r.Phase == PhaseReadBackComplete {
				if x.complete == nil {
					x.complete = map[[2]string]bool{}
				}
				x.complete[[2]string{r.Region, r.Topic}] = true
				addRegion(r.Region)
				continue
			}
			x.phases = append(x.phases, r)
		}
	}
	if x.run != nil && len(x.run.Regions) > 0 {
		x.regions = slices.Clone(x.run.Regions)
	} else {
		x.regions = regions
		slices.Sort(x.regions)
	}
	return x
}

// stored reports whether k was read back or delivered in some region.
func (x *hindex) stored(k msgKey) bool {
	for _, m := range x.readCount {
		if m[k] > 0 {
			return true
		}
	}
	for _, m := range x.deliveredIn {
		if m[k] {
			return true
		}
	}
	return false
}

// phaseAt returns the time of the last phase record named name.
func (x *hindex) phaseAt(name string) (time.Time, bool) {
	for i := len(x.phases) - 1; i >= 0; i-- {
		if x.phases[i].Phase == name {
			return x.phases[i].T, true
		}
	}
	return time.Time{}, false
}

func (x *hindex) stats() Stats {
	s := Stats{AckedPerRegion: map[string]int{}, ReadPerRegion: map[string]int{}}
	s.Sent = len(x.sends)
	for _, k := range x.sendOrder {
		si := x.sends[k]
		switch si.outcome {
		case KindAck:
			s.Acked++
			s.AckedPerRegion[si.ackRegion]++
		case KindFail:
			s.Failed++
		case KindTimeout:
			s.Timeouts++
		default:
			s.Unanswered++
		}
		if (si.outcome == KindTimeout || si.outcome == "") && x.stored(k) {
			s.IndefiniteStored++
		}
	}
	delivered := map[msgKey]bool{}
	for _, sk := range x.subOrder {
		seen := map[msgKey]bool{}
		for _, d := range x.deliveries[sk] {
			s.Deliveries++
			k := keyOf(d)
			if seen[k] {
				s.Duplicates++
			}
			seen[k] = true
			delivered[k] = true
		}
	}
	s.Delivered = len(delivered)
	for r, m := range x.readCount {
		s.ReadPerRegion[r] = len(m)
		for _, n := range m {
			s.StoredTwice += n - 1
		}
	}
	s.Faults = len(x.faults)
	for _, f := range x.faults {
		if f.Err != "" {
			s.FaultErrors++
		}
	}
	if !x.first.IsZero() {
		s.DurationMs = x.last.Sub(x.first).Milliseconds()
	}
	return s
}

// examples collects up to MaxExamples lines.
type examples []string

func (e *examples) add(format string, args ...any) {
	if len(*e) < MaxExamples {
		*e = append(*e, fmt.Sprintf(format, args...))
	}
}

// perRegion formats counts per region ("a: 3, b: 0").
func perRegionString(regions []string, n map[string]int) string {
	var parts []string
	for _, r := range regions {
		parts = append(parts, fmt.Sprintf("%s: %d", r, n[r]))
	}
	return strings.Join(parts, ", ")
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[msgKey]V) []msgKey {
	ks := make([]msgKey, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b msgKey) int {
		return cmp.Or(cmp.Compare(a.Origin, b.Origin), cmp.Compare(a.Producer, b.Producer), cmp.Compare(a.Seq, b.Seq))
	})
	return ks
}

// noReadBack names the regions of the run without a single read record
// ("" when every region has some): their read-back failed or never ran.
// hasReadBack reports whether region's read-back of topic is known to be
// complete, so that a message missing from it is missing from the region.
// Histories that do not record completeness never are.
func (x *hindex) hasReadBack(region, topic string) bool {
	return x.complete[[2]string{region, topic}]
}

func (x *hindex) noReadBack() string {
	var out []string
	for _, r := range x.regions {
		if len(x.reads[r]) == 0 {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; no read-back from " + strings.Join(out, ", ")
}
