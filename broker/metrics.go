package broker

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the broker's Prometheus metrics. Labels are bounded: the
// namespace ("tenant/namespace"), never topics or message IDs.
type metrics struct {
	msgsIn, bytesIn, msgsOut, bytesOut *prometheus.CounterVec
	publishLatency                     *prometheus.HistogramVec
	subscriptions                      *prometheus.GaugeVec
	topicsOwned                        prometheus.Gauge
	ledgersDeleted                     prometheus.Counter
	takeoverLostEntries                prometheus.Counter
	// Seek resolution (seek.go).
	seekResolutions *prometheus.CounterVec
	seekScanned     prometheus.Counter
	seekSeconds     prometheus.Histogram
	// Backlog operations and policies (backlogops.go, ttl.go).
	expiredEntries, evictedEntries *prometheus.CounterVec
	// Poison pills acknowledged by consumers (poison.go).
	poisonEntries *prometheus.CounterVec
	// Acknowledgement vectors (ackvector_bound.go, subsync.go).
	vectorDropped                     *prometheus.CounterVec
	subSyncSentBytes, subSyncSentUpds *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, s *Server) (*metrics, error) {
	m := &metrics{
		msgsIn: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_broker_messages_in_total",
			Help: "Messages stored (acknowledged to producers)."}, []string{"namespace"}),
		bytesIn: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_broker_bytes_in_total",
			Help: "Payload bytes stored (as sent, possibly compressed)."}, []string{"namespace"}),
		msgsOut: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_broker_messages_out_total",
			Help: "Messages dispatched to consumers."}, []string{"namespace"}),
		bytesOut: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_broker_bytes_out_total",
			Help: "Payload bytes dispatched to consumers."}, []string{"namespace"}),
		// Buckets from 0.5 ms (an fsync on a fast disk) to 10 s (an ensemble
		// change under a bookie failure).
		publishLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "meridian_broker_publish_latency_seconds",
			Help:    "Time from receiving a send to acknowledging it (ledger add durable on Qa bookies).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 15)}, []string{"namespace"}),
		subscriptions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meridian_broker_subscriptions",
			Help: "Subscriptions of the topics this broker owns."}, []string{"namespace"}),
		topicsOwned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meridian_broker_topics_owned",
			Help: "Topics this broker owns."}),
		ledgersDeleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_broker_retention_ledgers_deleted_total",
			Help: "Ledgers deleted by retention."}),
		takeoverLostEntries: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_broker_takeover_lost_entries_total",
			Help: "Entries lost on every replica that a topic takeover's scan skipped (the topic loads; its subscriptions stop at them)."}),
		seekResolutions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_broker_seek_resolutions_total",
			Help: "Start positions resolved (seeks, readers, new subscriptions at a start, resets), by kind and result."}, []string{"kind", "result"}),
		seekScanned: prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_broker_seek_scanned_entries_total",
			Help: "Entries read by the resolution scans of start positions (time, message ID, origin)."}),
		// From 1 ms (earliest/latest, no scan) to about 65 s (a scan of a
		// long log read from bookies).
		seekSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meridian_broker_seek_resolution_seconds",
			Help: "Time to resolve a start position.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 17)}),
		expiredEntries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_broker_expired_entries_total",
			Help: "Entries acknowledged on subscriptions by message TTL and expire-messages."}, []string{"namespace"}),
		poisonEntries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_broker_poison_entries_total",
			Help: "Entries consumers acknowledged because they could not decode them (Ack.poison_reason), by reason: corrupt, too_large, unknown_compression, schema, other."}, []string{"namespace", "reason"}),
		evictedEntries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_broker_evicted_entries_total",
			Help: "Entries acknowledged on subscriptions by the consumer_backlog_eviction quota action, by quota (size or age)."}, []string{"namespace", "quota"}),
		vectorDropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_subscription_ack_vector_dropped_total",
			Help: "Ranges and batch entries dropped from acknowledgement vectors to keep them within subscriptions.max_ack_vector_bytes (their entries are delivered again after a move)."}, []string{"namespace"}),
		subSyncSentBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_subscription_ack_replication_sent_bytes_total",
			Help: "Bytes of replicated-subscription updates (vectors, wire size) sent to the remote region, by kind: full vectors or deltas."}, []string{"remote", "kind"}),
		subSyncSentUpds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_subscription_ack_replication_sent_updates_total",
			Help: "Replicated-subscription updates sent to the remote region, by kind: full vectors, deltas, deletions."}, []string{"remote", "kind"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.msgsIn, m.bytesIn, m.msgsOut, m.bytesOut, m.publishLatency, m.subscriptions,
		m.topicsOwned, m.ledgersDeleted, m.takeoverLostEntries, m.seekResolutions, m.seekScanned, m.seekSeconds, &storageCollector{s: s},
		m.expiredEntries, m.evictedEntries, m.poisonEntries, m.vectorDropped, m.subSyncSentBytes, m.subSyncSentUpds,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "meridian_broker_inflight_produce_bytes",
			Help: "Payload bytes of sends read and not yet acknowledged (bounded by max_inflight_produce_bytes)."},
			func() float64 { return float64(s.sendBytes.inUse()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "meridian_broker_pending_delivery_bytes",
			Help: "Payload bytes queued towards consumers' streams and not yet written (bounded by max_pending_delivery_bytes)."},
			func() float64 { return float64(s.deliveryBytes.inUse()) })} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) in(ns string, msgs, bytes int, seconds float64) {
	m.msgsIn.WithLabelValues(ns).Add(float64(msgs))
	m.bytesIn.WithLabelValues(ns).Add(float64(bytes))
	m.publishLatency.WithLabelValues(ns).Observe(seconds)
}

func (m *metrics) out(ns string, msgs, bytes int) {
	m.msgsOut.WithLabelValues(ns).Add(float64(msgs))
	m.bytesOut.WithLabelValues(ns).Add(float64(bytes))
}

// storageCollector reports backlog and storage per namespace at scrape time.
type storageCollector struct{ s *Server }

var (
	backlogDesc = prometheus.NewDesc("meridian_broker_backlog_entries",
		"Entries not yet acknowledged, summed over the subscriptions of owned topics.", []string{"namespace"}, nil)
	storageDesc = prometheus.NewDesc("meridian_broker_storage_size_bytes",
		"Bytes stored in the retained ledgers of owned topics.", []string{"namespace"}, nil)
)

func (c *storageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- backlogDesc
	ch <- storageDesc
}

func (c *storageCollector) Collect(ch chan<- prometheus.Metric) {
	backlog := map[string]float64{}
	storage := map[string]float64{}
	for _, t := range c.s.loadedTopics() {
		ns := t.name.NamespaceName()
		_, b := t.ml.totals()
		storage[ns] += float64(b)
		for _, sub := range t.subList() {
			backlog[ns] += float64(sub.backlog())
		}
	}
	for ns, v := range backlog {
		ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, v, ns)
	}
	for ns, v := range storage {
		ch <- prometheus.MustNewConstMetric(storageDesc, prometheus.GaugeValue, v, ns)
	}
}
