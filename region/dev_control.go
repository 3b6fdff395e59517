//go:build unix

package region

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/meridianmq/meridian/chaos"
	"github.com/meridianmq/meridian/internal/netguard"
)

// The control API of a dev cluster: HTTP JSON on the control address.
//
//	GET  /v1/status   → DevStatus
//	POST /v1/link     DevLinkRequest    → DevStatus
//	POST /v1/process  DevProcessRequest → DevStatus
//	POST /v1/disk     DevDiskRequest    → DevStatus (clusters started with FaultInjection)
//	POST /v1/clock    DevClockRequest   → DevStatus (clusters started with FaultInjection)
//	POST /v1/region   DevRegionRequest  → DevStatus (rebuild a region empty, dev_rebuild.go)
//
// Errors answer 400 (bad input, naming the field) or 409 (the process is
// not in a state that allows the operation) with {"error": "..."}.

// DevStatus is what `meridian dev status` shows.
type DevStatus struct {
	DataDir   string             `json:"data_dir"`
	Control   string             `json:"control"`
	Processes []DevProcessStatus `json:"processes"`
	Links     []DevLinkStatus    `json:"links"`
	Proxies   []DevProxyPlan     `json:"proxies"`
}

// DevProcessStatus is one process of the cluster.
type DevProcessStatus struct {
	Role   string `json:"role"`
	Region string `json:"region"`
	Index  int    `json:"index"`
	ID     string `json:"id"`
	GRPC   string `json:"grpc"`
	HTTP   string `json:"http"`
	chaos.ProcessStatus
}

// DevLinkStatus is the one-way state of traffic from one endpoint to
// another: a region ("a") for the links between regions, a process
// ("a/broker-0") for the links inside a region.
type DevLinkStatus struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Latency string `json:"latency"`
	Jitter  string `json:"jitter"`
	Cut     bool   `json:"cut"`
	// Bandwidth is the limit in bytes per second (0: none).
	Bandwidth int64 `json:"bandwidth,omitempty"`
	// Drop is the fraction of chunks "lost" on the link.
	Drop float64 `json:"drop,omitempty"`
	// SlowClose is how long a close takes to reach the other side.
	SlowClose string `json:"slow_close,omitempty"`
}

// DevLinkRequest changes links. A and B name endpoints: regions ("a",
// the WAN links) or processes ("a/broker-0", "a/bookie-1", "a/meta-0",
// the links inside a region). Op is:
//   - "cut" (Oneway: only A→B), "heal" (both ways);
//   - "latency": Latency and Jitter as Go durations, both directions;
//   - "shape": Bandwidth ("1MB", "512KB", "0" = no limit), Drop (0..1) and
//     SlowClose (a Go duration) on A→B, and B→A unless Oneway;
//   - "partition": endpoints in different Groups cannot reach each other
//     (a region in a group stands for its WAN links); A and B unused;
//   - "heal-all": every cut healed and every shape removed (latency kept).
type DevLinkRequest struct {
	Op        string     `json:"op"`
	A         string     `json:"a"`
	B         string     `json:"b"`
	Oneway    bool       `json:"oneway,omitempty"`
	Latency   string     `json:"latency,omitempty"`
	Jitter    string     `json:"jitter,omitempty"`
	Bandwidth string     `json:"bandwidth,omitempty"`
	Drop      float64    `json:"drop,omitempty"`
	SlowClose string     `json:"slow_close,omitempty"`
	Groups    [][]string `json:"groups,omitempty"`
}

// DevDiskRequest applies a disk fault to one bookie of a cluster started
// with FaultInjection: Command is a faultfs command ("fail sync journal",
// "full on", "slow sync journal 50ms", "corrupt journal", "powerloss",
// "clear"; see faultfs.FaultFS.Command).
type DevDiskRequest struct {
	Region  string `json:"region"`
	Index   int    `json:"index"`
	Command string `json:"command"`
}

// DevClockRequest skews the clock of one metadata node of a cluster
// started with FaultInjection: Skew is a signed Go duration ("+5s", "-3s",
// "0" to restore).
type DevClockRequest struct {
	Region string `json:"region"`
	Index  int    `json:"index"`
	Skew   string `json:"skew"`
}

// DevProcessRequest acts on one process: Op "kill" sends Signal (KILL,
// TERM, INT, STOP or CONT; default KILL), "start" restarts an exited
// process with the same config and data, "restart" stops it gracefully
// (TERM, then KILL after a grace period) and starts it again, "wipe"
// deletes the data of an exited bookie (its next start joins as a new,
// empty bookie under the same ID).
type DevProcessRequest struct {
	Op     string `json:"op"`
	Role   string `json:"role"`
	Region string `json:"region"`
	Index  int    `json:"index"`
	Signal string `json:"signal,omitempty"`
}

// errConflict marks errors about a process's state (HTTP 409).
var errConflict = errors.New("conflict")

// Status returns the processes, links and proxies.
func (d *Dev) Status() DevStatus {
	st := DevStatus{DataDir: d.cfg.DataDir, Proxies: d.plan.Proxies}
	if d.ctlLis != nil {
		st.Control = d.ctlLis.Addr().String()
	}
	for _, p := range d.procs {
		st.Processes = append(st.Processes, DevProcessStatus{Role: p.role, Region: p.region, Index: p.index, ID: p.node.ID, GRPC: p.node.GRPC, HTTP: p.node.HTTP, ProcessStatus: p.p.Status()})
	}
	st.Links = d.linkStatus()
	return st
}

func (d *Dev) regionNames() []string {
	var out []string
	for _, r := range d.plan.Regions {
		out = append(out, r.Name)
	}
	return out
}

func (d *Dev) checkRegion(field, name string) error {
	for _, r := range d.plan.Regions {
		if r.Name == name {
			return nil
		}
	}
	return fmt.Errorf("%s: region %q is not one of %s", field, name, strings.Join(d.regionNames(), ","))
}

func parseDevDuration(field, s string) (time.Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration like 40ms", field, s)
	}
	if v < 0 || v > maxDevLatency {
		return 0, fmt.Errorf("%s: %v must be in [0, %v]", field, v, maxDevLatency)
	}
	return v, nil
}

func (d *Dev) findProc(role, region string, index int) (*devProc, error) {
	if role != RoleMeta && role != RoleBookie && role != RoleBroker {
		return nil, fmt.Errorf("role: %q is not meta, bookie or broker", role)
	}
	if err := d.checkRegion("region", region); err != nil {
		return nil, err
	}
	n := 0
	for _, p := range d.procs {
		if p.role == role && p.region == region {
			if p.index == index {
				return p, nil
			}
			n++
		}
	}
	return nil, fmt.Errorf("index: %d is out of range: region %s has %d %s process(es), 0..%d", index, region, n, role, n-1)
}

// Process applies a process request.
func (d *Dev) Process(ctx context.Context, req DevProcessRequest) error {
	p, err := d.findProc(req.Role, req.Region, req.Index)
	if err != nil {
		return err
	}
	switch req.Op {
	case "kill":
		name := req.Signal
		if name == "" {
			name = "KILL"
		}
		sig, err := chaos.ParseSignal(name)
		if err != nil {
			return fmt.Errorf("signal: %w", err)
		}
		if err := p.p.Signal(sig); err != nil {
			return fmt.Errorf("%w: %w", errConflict, err)
		}
		if sig == syscall.SIGKILL {
			// Answer once it is gone, so that a `start` right after works.
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return p.p.Wait(wctx)
		}
		return nil
	case "start":
		if err := p.p.Start(); err != nil {
			if errors.Is(err, chaos.ErrProcessRunning) {
				return fmt.Errorf("%w: %w (kill it first, or send CONT if paused)", errConflict, err)
			}
			return err
		}
		return p.p.WaitReady(ctx)
	default:
		return d.processFault(ctx, p, req)
	}
}

func (d *Dev) startControl() error {
	lis := d.plan.takeListener(d.plan.Control)
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", d.plan.Control); err != nil {
			return fmt.Errorf("dev: control address %s: %w", d.plan.Control, err)
		}
	}
	d.ctlLis = lis
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		writeDevJSON(w, http.StatusOK, d.Status())
	})
	mux.HandleFunc("POST /v1/link", func(w http.ResponseWriter, r *http.Request) {
		var req DevLinkRequest
		if !decodeDevJSON(w, r, &req) {
			return
		}
		if err := d.Link(req); err != nil {
			writeDevError(w, err)
			return
		}
		d.log.Info("link changed", "op", req.Op, "a", req.A, "b", req.B, "oneway", req.Oneway, "latency", req.Latency, "jitter", req.Jitter,
			"bandwidth", req.Bandwidth, "drop", req.Drop, "slow_close", req.SlowClose, "groups", req.Groups)
		writeDevJSON(w, http.StatusOK, d.Status())
	})
	mux.HandleFunc("POST /v1/process", func(w http.ResponseWriter, r *http.Request) {
		var req DevProcessRequest
		if !decodeDevJSON(w, r, &req) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), d.cfg.ReadyTimeout)
		defer cancel()
		// Bounded by ready_timeout instead of the write timeout: a
		// process start waits for readiness.
		netguard.LiftWriteTimeout(w)
		if err := d.Process(ctx, req); err != nil {
			writeDevError(w, err)
			return
		}
		d.log.Info("process changed", "op", req.Op, "role", req.Role, "region", req.Region, "index", req.Index, "signal", req.Signal)
		writeDevJSON(w, http.StatusOK, d.Status())
	})
	mux.HandleFunc("POST /v1/disk", d.handleDisk)
	mux.HandleFunc("POST /v1/clock", d.handleClock)
	mux.HandleFunc("POST /v1/region", func(w http.ResponseWriter, r *http.Request) {
		netguard.LiftWriteTimeout(w) // a rebuild is bounded by ready_timeout
		d.handleRegion(w, r)
	})
	d.control = netguard.DefaultHTTPServer(d.controlAuth(mux), nil)
	go func() { _ = d.control.Serve(lis) }()
	d.log.Info("control server listening", "addr", lis.Addr().String())
	return nil
}

func decodeDevJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	const limit = 1 << 16
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			err = fmt.Errorf("over the limit of %d bytes", limit)
		}
		writeDevJSON(w, http.StatusBadRequest, map[string]string{"error": "request body: " + err.Error()})
		return false
	}
	return true
}

func writeDevError(w http.ResponseWriter, err error) {
	code := http.StatusBadRequest
	if errors.Is(err, errConflict) {
		code = http.StatusConflict
	} else if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "exited") {
		code = http.StatusServiceUnavailable
	}
	writeDevJSON(w, code, map[string]string{"error": strings.TrimPrefix(err.Error(), errConflict.Error()+": ")})
}

func writeDevJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// DevControlClient talks to a running dev cluster's control server.
type DevControlClient struct {
	// Addr is the control address (cluster.json "control").
	Addr string
	// HTTP is the client used (default: 5 minute timeout, as a start waits
	// for readiness).
	HTTP *http.Client
	// Token is the control endpoint's bearer token (the content of
	// DataDir/control.token; DevClusterInfo.ControlClient reads it).
	Token string
}

// Status fetches the cluster's status.
func (c *DevControlClient) Status(ctx context.Context) (DevStatus, error) {
	var st DevStatus
	return st, c.do(ctx, http.MethodGet, "/v1/status", nil, &st)
}

// Link sends a link request.
func (c *DevControlClient) Link(ctx context.Context, req DevLinkRequest) (DevStatus, error) {
	var st DevStatus
	return st, c.do(ctx, http.MethodPost, "/v1/link", req, &st)
}

// Process sends a process request.
func (c *DevControlClient) Process(ctx context.Context, req DevProcessRequest) (DevStatus, error) {
	var st DevStatus
	return st, c.do(ctx, http.MethodPost, "/v1/process", req, &st)
}

func (c *DevControlClient) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.Addr+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Minute}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("dev control %s: %w (is `meridian dev` still running?)", c.Addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return errors.New(e.Error)
		}
		return fmt.Errorf("dev control %s: %s", c.Addr, resp.Status)
	}
	return json.Unmarshal(b, out)
}
