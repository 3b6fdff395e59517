package bookie

import "github.com/prometheus/client_golang/prometheus"

// metrics are the bookie's Prometheus metrics (subsystem "bookie").
type metrics struct {
	addLatency   prometheus.Histogram
	readLatency  prometheus.Histogram
	fsyncLatency prometheus.Histogram
	groupEntries prometheus.Histogram
	groupBytes   prometheus.Histogram
	fsyncs       prometheus.Counter
	addEntries   prometheus.Counter
	addBytes     prometheus.Counter
	addErrors    *prometheus.CounterVec
	readEntries  prometheus.Counter
	readBytes    prometheus.Counter
	// readRuns counts range reads that fetched several back-to-back
	// entries with one pread (storage.readRun).
	readRuns     prometheus.Counter
	readErrors   *prometheus.CounterVec
	ledgers      prometheus.Gauge
	journalBytes prometheus.Gauge
	diskUsed     prometheus.Gauge
	diskTotal    prometheus.Gauge
	readOnly     prometheus.Gauge
	gcReclaimed  prometheus.Counter
	gcRelocated  prometheus.Counter
	checkpoints  prometheus.Counter
	scrubs       prometheus.Counter
	scrubCorrupt prometheus.Gauge
	// queuedAddBytes is the bytes held by storage.queued
	// (MaxQueuedAddBytes); streamAddBytes the bytes held by the AddEntries
	// streams' budgets (MaxInflightAddBytesPerStream each), summed.
	queuedAddBytes prometheus.Gauge
	streamAddBytes prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	// Latency buckets span 50µs (page-cache fsync on tmpfs/NVMe) to ~3s
	// (a stalled disk); adds are dominated by fdatasync, typically 0.1–20ms.
	lat := prometheus.ExponentialBuckets(50e-6, 2, 17)
	m := &metrics{
		addLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meridian_bookie_add_latency_seconds", Help: "Time from receiving an add to acknowledging it (journal write + fdatasync).", Buckets: lat}),
		readLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meridian_bookie_read_latency_seconds", Help: "Time to serve one entry read.", Buckets: lat}),
		fsyncLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meridian_bookie_journal_fsync_latency_seconds", Help: "Duration of each journal fdatasync.", Buckets: lat}),
		// Records per fdatasync from 1 to 16384 in powers of 2 (one sync
		// covers up to syncQueueGroups+1 groups of GroupMaxEntries).
		groupEntries: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meridian_bookie_journal_group_entries", Help: "Records written per journal group commit (one fdatasync).", Buckets: prometheus.ExponentialBuckets(1, 2, 15)}),
		// Bytes per fdatasync from 64 B to 64 MiB (GroupMaxBytes is 2 MiB
		// per group; one sync covers up to syncQueueGroups+1 groups).
		groupBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meridian_bookie_journal_group_bytes", Help: "Bytes written per journal group commit.", Buckets: prometheus.ExponentialBuckets(64, 4, 11)}),
		fsyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_journal_fsyncs_total", Help: "Journal fdatasync calls."}),
		addEntries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_add_entries_total", Help: "Entries acknowledged as durable."}),
		addBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_add_bytes_total", Help: "Payload bytes acknowledged as durable."}),
		addErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_bookie_add_errors_total", Help: "Adds refused or failed, by reason."}, []string{"reason"}),
		readEntries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_read_entries_total", Help: "Entries read successfully."}),
		readBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_read_bytes_total", Help: "Payload bytes read successfully."}),
		readRuns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_read_runs_total", Help: "Range reads of several back-to-back entries done with one read call."}),
		readErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_bookie_read_errors_total", Help: "Reads failed, by reason."}, []string{"reason"}),
		ledgers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_bookie_ledgers", Help: "Ledgers stored on this bookie."}),
		journalBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_bookie_journal_bytes", Help: "Bytes in journal files on disk (live and dead)."}),
		diskUsed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_bookie_disk_used_bytes", Help: "Used bytes of the fullest data disk."}),
		diskTotal: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_bookie_disk_total_bytes", Help: "Size of the fullest data disk."}),
		readOnly: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_bookie_read_only", Help: "1 when the bookie refuses adds (disk full or I/O error)."}),
		gcReclaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_gc_reclaimed_bytes_total", Help: "Journal bytes freed by garbage collection."}),
		gcRelocated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_gc_relocated_entries_total", Help: "Live entries copied forward by compaction."}),
		checkpoints: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_checkpoints_total", Help: "Index checkpoints written."}),
		scrubs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_bookie_scrubs_total", Help: "Completed scrubs (CRC verification of every stored entry)."}),
		scrubCorrupt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_bookie_scrub_corrupt_entries", Help: "Corrupt entries found by the last completed scrub."}),
		queuedAddBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_bookie_journal_queued_add_bytes", Help: "Bytes of entry records queued for the journal and not yet written, fsynced and answered (bounded by max_queued_add_bytes)."}),
		streamAddBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_bookie_add_stream_inflight_bytes", Help: "Payload bytes of adds read from AddEntries streams and not yet answered, summed over streams (each bounded by max_inflight_add_bytes_per_stream)."}),
	}
	for _, c := range []prometheus.Collector{m.addLatency, m.readLatency, m.fsyncLatency, m.groupEntries, m.groupBytes,
		m.fsyncs, m.addEntries, m.addBytes, m.addErrors, m.readEntries, m.readBytes, m.readErrors, m.ledgers,
		m.journalBytes, m.diskUsed, m.diskTotal, m.readOnly, m.gcReclaimed, m.gcRelocated, m.checkpoints,
		m.scrubs, m.scrubCorrupt, m.readRuns, m.queuedAddBytes, m.streamAddBytes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
