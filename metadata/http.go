package metadata

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpHandler serves /metrics (from the node's Registerer when it is also a
// Gatherer), /healthz (the process runs) and /readyz (every hosted shard
// has a leader) and /status (JSON: who leads each hosted shard, in which
// term, and whether this node does; see NodeStatus).
func (n *Node) httpHandler() http.Handler {
	mux := http.NewServeMux()
	if g, ok := n.cfg.Registerer.(prometheus.Gatherer); ok {
		mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	} else {
		mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "no metrics registry configured", http.StatusNotFound)
		})
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !n.Ready() {
			http.Error(w, "not ready: some hosted shard has no leader", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		st, err := n.Status()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	})
	if sc, ok := n.clock.(*SkewClock); ok && n.cfg.FaultInjection {
		n.handleClock(mux, sc)
	}
	return mux
}

// ClockSkewRequest is the body of POST /debug/clock: Skew is a signed Go
// duration ("+5s", "-3s", "0" restores the real clock).
type ClockSkewRequest struct {
	Skew string `json:"skew"`
}

// ClockSkewStatus answers /debug/clock: the current skew and the node's
// (skewed) time.
type ClockSkewStatus struct {
	Skew string    `json:"skew"`
	Now  time.Time `json:"now"`
}

// handleClock serves the clock seam of a node run with fault_injection.
func (n *Node) handleClock(mux *http.ServeMux, sc *SkewClock) {
	answer := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(ClockSkewStatus{Skew: sc.Skew().String(), Now: sc.Now()})
	}
	mux.HandleFunc("GET /debug/clock", func(w http.ResponseWriter, _ *http.Request) { answer(w) })
	mux.HandleFunc("POST /debug/clock", func(w http.ResponseWriter, r *http.Request) {
		var req ClockSkewRequest
		const limit = 4096
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit)).Decode(&req); err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				err = fmt.Errorf("over the limit of %d bytes", limit)
			}
			http.Error(w, "skew: bad JSON body: "+err.Error(), http.StatusBadRequest)
			return
		}
		d, err := time.ParseDuration(strings.TrimSpace(req.Skew))
		if err != nil {
			http.Error(w, fmt.Sprintf("skew: %q is not a Go duration", req.Skew), http.StatusBadRequest)
			return
		}
		if err := sc.SetSkew(d); err != nil {
			http.Error(w, "skew: "+err.Error(), http.StatusBadRequest)
			return
		}
		n.log.Warn("fault injection: clock skewed", "skew", d)
		answer(w)
	})
}
