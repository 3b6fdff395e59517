package ledger

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the client's Prometheus metrics. Labels are bounded: region
// (constant) and a result/kind from a fixed set; never ledger IDs.
type metrics struct {
	addLatency      prometheus.Histogram
	adds            *prometheus.CounterVec
	addBytes        prometheus.Counter
	inFlight        prometheus.Gauge
	ensembleChanges prometheus.Counter
	readLatency     prometheus.Histogram
	reads           *prometheus.CounterVec
	speculative     prometheus.Counter
	recoveries      *prometheus.CounterVec
	fenced          prometheus.Counter
	busyRetries     prometheus.Counter
}

// latencyBuckets span 100 µs (group commit on a fast disk) to ~13 s (add
// timeouts), doubling: add latency is dominated by fsync and queueing.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2, 18)

func newMetrics(reg prometheus.Registerer, region string) (*metrics, error) {
	cl := prometheus.Labels{"region": region}
	m := &metrics{
		addLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meridian_ledger_add_latency_seconds", Help: "Time from AppendAsync to the entry being reported added.",
			Buckets: latencyBuckets, ConstLabels: cl}),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_ledger_adds_total", Help: "Entries reported to writers, by result (ok, error).", ConstLabels: cl}, []string{"result"}),
		addBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_ledger_add_bytes_total", Help: "Payload bytes reported added (one copy).", ConstLabels: cl}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_ledger_adds_in_flight", Help: "Adds sent but not yet reported, over all writers.", ConstLabels: cl}),
		ensembleChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_ledger_ensemble_changes_total", Help: "Ensemble changes recorded after bookie failures.", ConstLabels: cl}),
		readLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meridian_ledger_read_latency_seconds", Help: "Time to read one entry from the first replica that answered.",
			Buckets: latencyBuckets, ConstLabels: cl}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_ledger_reads_total", Help: "Entry reads by result (ok, error).", ConstLabels: cl}, []string{"result"}),
		speculative: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_ledger_speculative_reads_total", Help: "Reads sent to another replica because the first was slow or failed.", ConstLabels: cl}),
		recoveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_ledger_recoveries_total", Help: "OpenRecover outcomes (recovered, already_closed, error).", ConstLabels: cl}, []string{"result"}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_ledger_writers_fenced_total", Help: "Writers stopped because their ledger was fenced.", ConstLabels: cl}),
		busyRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_ledger_add_busy_retries_total", Help: "Adds resent to the same bookie after it answered \"too many in flight\" (back-pressure).", ConstLabels: cl}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.addLatency, m.adds, m.addBytes, m.inFlight, m.ensembleChanges,
			m.readLatency, m.reads, m.speculative, m.recoveries, m.fenced, m.busyRetries} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
