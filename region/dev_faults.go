package region

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/meridianmq/meridian/chaos"
	"github.com/meridianmq/meridian/metadata"
)

// Fault controls of a dev cluster started with DevConfig.FaultInjection:
// disk faults on bookies (their POST /debug/faults), clock skew on metadata
// nodes (their POST /debug/clock), and the process ops restart and wipe.

// DevFaultResponse answers POST /v1/disk and /v1/clock: the cluster's
// status plus the fault layer's answer (for a disk command the faultfs
// answer, e.g. "corrupt PATH offset=N bit=B", "id 3", "powerloss files=2\n
// PATH synced=N lost=M"; for a clock the node's new skew, e.g. "5s").
// A client decoding into DevStatus ignores Answer.
type DevFaultResponse struct {
	DevStatus
	Answer string `json:"answer"`
}

// errNoFaultInjection answers fault requests on a cluster started
// without FaultInjection (HTTP 409).
var errNoFaultInjection = fmt.Errorf("%w: the cluster was not started with fault injection (meridian dev --fault-injection)", errConflict)

// addFaultConfig adds the fault-injection keys to a process's YAML config.
func (d *Dev) addFaultConfig(role string, cfg map[string]any) {
	if !d.cfg.FaultInjection {
		return
	}
	switch role {
	case RoleMeta:
		cfg["fault_injection"] = true
	case RoleBookie:
		cfg["fault_injection"] = true
		if d.cfg.UnsafeAckBeforeSync {
			cfg["unsafe_ack_before_sync"] = true
		}
	}
}

// Disk applies a faultfs command (see faultfs.FaultFS.Command) to the
// bookie Index of Region and returns the fault layer's answer. After
// "powerloss" the bookie dies (its unsynced bytes lost); Disk returns once
// it has exited, so a process "start" right after works.
func (d *Dev) Disk(ctx context.Context, req DevDiskRequest) (string, error) {
	if !d.cfg.FaultInjection {
		return "", errNoFaultInjection
	}
	if strings.TrimSpace(req.Command) == "" {
		return "", errors.New("command: empty; want a faultfs command such as \"fail sync journal\"")
	}
	p, err := d.findProc(RoleBookie, req.Region, req.Index)
	if err != nil {
		return "", err
	}
	if st := p.p.Status().State; st != chaos.StateRunning {
		return "", fmt.Errorf("%w: %s is %s, not running", errConflict, p.p.Spec().Name, st)
	}
	ans, err := d.postDebug(ctx, d.scheme()+"://"+p.node.HTTP+"/debug/faults", "text/plain", []byte(req.Command))
	if err != nil {
		return "", fmt.Errorf("command: %s: %w", p.p.Spec().Name, err)
	}
	ans = strings.TrimSpace(ans)
	if strings.Fields(req.Command)[0] == "powerloss" {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := p.p.Wait(wctx); err != nil {
			return ans, fmt.Errorf("%s did not die after the power loss: %w", p.p.Spec().Name, err)
		}
	}
	return ans, nil
}

// Clock skews the clock of the metadata node Index of Region (Skew a
// signed Go duration, "0" restores it) and returns the node's new skew.
func (d *Dev) Clock(ctx context.Context, req DevClockRequest) (string, error) {
	if !d.cfg.FaultInjection {
		return "", errNoFaultInjection
	}
	skew, err := time.ParseDuration(strings.TrimSpace(req.Skew))
	if err != nil {
		return "", fmt.Errorf("skew: %q is not a signed duration like +5s or -3s", req.Skew)
	}
	if skew > metadata.MaxClockSkewInjection || skew < -metadata.MaxClockSkewInjection {
		return "", fmt.Errorf("skew: %v must be in [-%v, %v]", skew, metadata.MaxClockSkewInjection, metadata.MaxClockSkewInjection)
	}
	p, err := d.findProc(RoleMeta, req.Region, req.Index)
	if err != nil {
		return "", err
	}
	if st := p.p.Status().State; st != chaos.StateRunning {
		return "", fmt.Errorf("%w: %s is %s, not running", errConflict, p.p.Spec().Name, st)
	}
	body, _ := json.Marshal(metadata.ClockSkewRequest{Skew: skew.String()})
	ans, err := d.postDebug(ctx, d.scheme()+"://"+p.node.HTTP+"/debug/clock", "application/json", body)
	if err != nil {
		return "", fmt.Errorf("skew: %s: %w", p.p.Spec().Name, err)
	}
	var st metadata.ClockSkewStatus
	if err := json.Unmarshal([]byte(ans), &st); err != nil {
		return "", fmt.Errorf("%s: bad /debug/clock answer %q", p.p.Spec().Name, ans)
	}
	return st.Skew, nil
}

// postDebug posts to a process's debug endpoint (with the admin token
// when secured).
func (d *Dev) postDebug(ctx context.Context, url, ctype string, body []byte) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", ctype)
	resp, err := d.httpClient(30 * time.Second).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusBadRequest:
		return "", errors.New(strings.TrimSpace(string(b)))
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("%w: %s: %s", errConflict, resp.Status, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// processFault runs the process ops beyond kill and start: "restart"
// (graceful stop, then start and wait until ready) and "wipe" (a bookie
// that has exited loses its data and is re-formatted as a new instance
// under the same ID; start it afterwards).
func (d *Dev) processFault(ctx context.Context, p *devProc, req DevProcessRequest) error {
	switch req.Op {
	case "restart":
		p.p.Stop(ctx)
		if err := p.p.Start(); err != nil {
			return err
		}
		return p.p.WaitReady(ctx)
	case "wipe":
		if p.role != RoleBookie {
			return fmt.Errorf("role: wipe applies to bookies, not %s", p.role)
		}
		if st := p.p.Status().State; st == chaos.StateRunning || st == chaos.StatePaused {
			return fmt.Errorf("%w: %s is %s; kill it first", errConflict, p.p.Spec().Name, st)
		}
		rdir := filepath.Join(d.cfg.DataDir, p.region)
		base := filepath.Join(rdir, fmt.Sprintf("%s-%d", p.role, p.index))
		if err := os.RemoveAll(base); err != nil {
			return fmt.Errorf("dev: wipe %s: %w", p.p.Spec().Name, err)
		}
		// The metadata still holds the old instance's cookie: the bookie
		// would refuse its empty directories. Format it as a new instance;
		// autorecovery re-replicates what the old one held.
		cmd := exec.CommandContext(ctx, d.cfg.Binary, "bookie", "format", "--force", "--config", base+".yaml")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("dev: wipe %s: bookie format: %w: %s", p.p.Spec().Name, err, bytes.TrimSpace(out))
		}
		d.log.Warn("bookie wiped and re-formatted", "process", p.p.Spec().Name)
		return nil
	}
	return fmt.Errorf("op: %q is not kill, start, restart or wipe", req.Op)
}

func (d *Dev) handleDisk(w http.ResponseWriter, r *http.Request) {
	var req DevDiskRequest
	if !decodeDevJSON(w, r, &req) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), d.cfg.ReadyTimeout)
	defer cancel()
	ans, err := d.Disk(ctx, req)
	if err != nil {
		writeDevError(w, err)
		return
	}
	d.log.Warn("disk fault", "region", req.Region, "index", req.Index, "command", req.Command, "answer", ans)
	writeDevJSON(w, http.StatusOK, DevFaultResponse{DevStatus: d.Status(), Answer: ans})
}

func (d *Dev) handleClock(w http.ResponseWriter, r *http.Request) {
	var req DevClockRequest
	if !decodeDevJSON(w, r, &req) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), d.cfg.ReadyTimeout)
	defer cancel()
	ans, err := d.Clock(ctx, req)
	if err != nil {
		writeDevError(w, err)
		return
	}
	d.log.Warn("clock skewed", "region", req.Region, "index", req.Index, "skew", ans)
	writeDevJSON(w, http.StatusOK, DevFaultResponse{DevStatus: d.Status(), Answer: ans})
}

// Disk sends a disk fault request (see Dev.Disk).
func (c *DevControlClient) Disk(ctx context.Context, req DevDiskRequest) (DevFaultResponse, error) {
	var r DevFaultResponse
	return r, c.do(ctx, http.MethodPost, "/v1/disk", req, &r)
}

// Clock sends a clock skew request (see Dev.Clock).
func (c *DevControlClient) Clock(ctx context.Context, req DevClockRequest) (DevFaultResponse, error) {
	var r DevFaultResponse
	return r, c.do(ctx, http.MethodPost, "/v1/clock", req, &r)
}
