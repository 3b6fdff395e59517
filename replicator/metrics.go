package replicator

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the replicators' counters, labelled by remote region only
// (bounded cardinality). The gauges (backlog, lag, stalled) are collected
// by the broker from Status at scrape time.
type Metrics struct {
	sentEntries *prometheus.CounterVec
	sentBytes   *prometheus.CounterVec
	reconnects  *prometheus.CounterVec
	stalls      *prometheus.CounterVec
}

// NewMetrics builds the counters and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		sentEntries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_replication_sent_entries_total",
			Help: "Entries the remote region persisted (duplicates and skipped entries not counted)."}, []string{"remote"}),
		sentBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_replication_sent_bytes_total",
			Help: "Bytes of the entries the remote region persisted."}, []string{"remote"}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_replication_reconnects_total",
			Help: "Replication sessions ended (link failure, rejection, restart) and started again."}, []string{"remote"}),
		stalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_replication_stalls_total",
			Help: "Times a replicator had backlog and made no progress for the stall timeout (it restarts itself)."}, []string{"remote"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.sentEntries, m.sentBytes, m.reconnects, m.stalls} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *Metrics) sent(remote string, entries int, bytes int64) {
	if m == nil {
		return
	}
	m.sentEntries.WithLabelValues(remote).Add(float64(entries))
	m.sentBytes.WithLabelValues(remote).Add(float64(bytes))
}

func (m *Metrics) reconnect(remote string) {
	if m != nil {
		m.reconnects.WithLabelValues(remote).Inc()
	}
}

func (m *Metrics) stall(remote string) {
	if m != nil {
		m.stalls.WithLabelValues(remote).Inc()
	}
}
