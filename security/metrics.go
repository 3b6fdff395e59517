package security

import (
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// reloadStats counts a reloader's outcomes for the collector.
type reloadStats struct {
	failures atomic.Int64
	loads    atomic.Int64
}

func (s *reloadStats) failed() { s.failures.Add(1) }
func (s *reloadStats) ok()     { s.loads.Add(1) }

// collector exports a Runtime's TLS and key state. The component is a
// constant label, so components sharing a registry (one process running
// a whole region) each register their own.
type collector struct {
	rt       *Runtime
	notAfter *prometheus.Desc
	failures *prometheus.Desc
}

func newCollector(rt *Runtime, component string) *collector {
	l := prometheus.Labels{"component": component}
	return &collector{rt: rt,
		notAfter: prometheus.NewDesc("meridian_tls_cert_not_after_seconds",
			"Expiry of the TLS certificate in use (Unix seconds); alert well before it.", nil, l),
		failures: prometheus.NewDesc("meridian_security_reload_failures_total",
			"Reloads of TLS material or token keys refused because the new files were invalid (the previous stays in use).",
			[]string{"kind"}, l),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.notAfter
	ch <- c.failures
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	if t := c.rt.tls; t != nil {
		if na := t.NotAfter(); !na.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.notAfter, prometheus.GaugeValue, float64(na.Unix()))
		}
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(t.stats.failures.Load()), "tls")
	}
	if v := c.rt.verifier; v != nil {
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(v.stats.failures.Load()), "token_keys")
	}
}

// Register registers the Runtime's metrics (meridian_tls_cert_not_after_seconds,
// meridian_security_reload_failures_total) with reg under the component
// label (e.g. "broker"). A nil reg or Runtime registers nothing. A
// component registered again (restarted in the same process) replaces
// the previous registration, so the metrics follow the newest runtime.
func (rt *Runtime) Register(reg prometheus.Registerer, component string) error {
	if rt == nil || reg == nil {
		return nil
	}
	c := newCollector(rt, component)
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		reg.Unregister(are.ExistingCollector)
		err = reg.Register(c)
	}
	return err
}

// ReloadFailures counts the reloads refused because the new files were
// invalid.
func (t *TLS) ReloadFailures() int64 { return t.stats.failures.Load() }

// ReloadFailures counts the reloads refused because the new key file was
// invalid.
func (v *Verifier) ReloadFailures() int64 { return v.stats.failures.Load() }
