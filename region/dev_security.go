//go:build unix

package region

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/meridianmq/meridian/security"
)

// A dev cluster is secured by default: at its first start it provisions
// (security.Provision) DataDir/security with a CA, a certificate for every
// component role of every region (broker.<r>, bookie.<r>, metadata.<r>,
// autorecovery.<r>), an HS256 key, an admin token (superuser "admin")
// and a gossip key; every process runs with its security block (TLS,
// token authentication, mutual TLS between components) and the brokers'
// WAN gossip is encrypted. cluster.json names the CA and the admin token,
// so that the CLI, the drill and the chaos tools find them. Whatever the
// mode, the control endpoint requires the token of DataDir/control.token.

// Files of a dev cluster's data directory (with DevPlanFile and
// DevClusterFile).
const (
	// DevSecurityDir holds the provisioned credentials of a secured
	// cluster (mode 0700, files 0600).
	DevSecurityDir = "security"
	// DevControlTokenFile holds the control endpoint's bearer token (mode
	// 0600, random, created at the first start and kept).
	DevControlTokenFile = "control.token"
	// devGossipKeyFile (in DevSecurityDir) holds the brokers' WAN gossip
	// key (one base64 AES-256 key, security.ParseGossipKeys).
	devGossipKeyFile = "gossip.key"
)

// devComponentKinds are the component kinds a region's certificates are
// issued for.
var devComponentKinds = []string{"broker", "bookie", "metadata", "autorecovery"}

// setupSecurity creates (or reuses) the control token and, unless
// Insecure, the provisioned credentials, and the dev process's own client
// runtime (the CA and the admin token) for its readiness, namespace and
// debug calls to the processes.
func (d *Dev) setupSecurity() error {
	tok, err := loadOrCreateSecret(filepath.Join(d.cfg.DataDir, DevControlTokenFile))
	if err != nil {
		return fmt.Errorf("dev: control token: %w", err)
	}
	d.ctlToken = tok
	if d.cfg.Insecure {
		d.log.Warn("dev cluster is INSECURE (--insecure): plaintext, no authentication")
		return nil
	}
	var roles []string
	for _, r := range d.plan.Regions {
		for _, k := range devComponentKinds {
			roles = append(roles, security.ComponentRole(k, r.Name))
		}
	}
	p, err := security.Provision(filepath.Join(d.cfg.DataDir, DevSecurityDir), roles, []string{"127.0.0.1", "localhost"})
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	d.sec = p
	gk := filepath.Join(p.Dir, devGossipKeyFile)
	if _, err := os.Stat(gk); errors.Is(err, os.ErrNotExist) {
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		if err := writeFileAtomic(gk, []byte(base64.StdEncoding.EncodeToString(key)+"\n")); err != nil {
			return fmt.Errorf("dev: gossip key: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("dev: gossip key: %w", err)
	}
	rt, err := security.ClientRuntime(security.TLSFiles{CAFile: p.CA}, security.TokenFromFile(p.AdminToken), d.log.With("component", "security"))
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	d.rt = rt
	d.log.Info("dev cluster is secured", "ca", p.CA, "admin_token", p.AdminToken)
	return nil
}

// secure reports whether the cluster runs with TLS and authentication.
func (d *Dev) secure() bool { return d.sec.Dir != "" }

// scheme is the processes' HTTP scheme.
func (d *Dev) scheme() string {
	if d.secure() {
		return "https"
	}
	return "http"
}

// httpClient returns a client of the processes' HTTP endpoints: with the
// CA and the admin token when secured.
func (d *Dev) httpClient(timeout time.Duration) *http.Client {
	d.hcOnce.Do(func() { d.hc = d.rt.HTTPClient(0) }) // a nil rt gives a plain client
	return &http.Client{Transport: d.hc.Transport, Timeout: timeout}
}

// addSecurityConfig adds the security block (and the brokers' gossip
// key) to the config of a process of role in region.
func (d *Dev) addSecurityConfig(role, region string, cfg map[string]any) {
	if !d.secure() {
		return
	}
	kind := map[string]string{RoleMeta: "metadata", RoleBookie: "bookie", RoleBroker: "broker"}[role]
	c := d.sec.Component(security.ComponentRole(kind, region))
	block := map[string]any{
		"tls":        map[string]any{"ca_file": c.TLS.CAFile, "cert_file": c.TLS.CertFile, "key_file": c.TLS.KeyFile},
		"auth":       map[string]any{"enabled": true, "keys": map[string]any{"secret_key_file": c.Auth.Keys.SecretKeyFile}},
		"superusers": c.Superusers,
	}
	if role != RoleBroker {
		cfg["security"] = block
		return
	}
	bc, _ := cfg["broker"].(map[string]any)
	if bc == nil {
		return
	}
	bc["security"] = block
	if wan, ok := bc["wan"].(map[string]any); ok {
		wan["gossip_key_file"] = filepath.Join(d.sec.Dir, devGossipKeyFile)
	}
}

// controlAuth refuses control requests without the control token (401).
func (d *Dev) controlAuth(h http.Handler) http.Handler {
	want := []byte("Bearer " + d.ctlToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="meridian-dev"`)
			writeDevJSON(w, http.StatusUnauthorized, map[string]string{"error": "control token required: Authorization: Bearer <the content of " +
				filepath.Join(d.cfg.DataDir, DevControlTokenFile) + ">"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// loadOrCreateSecret returns the token in path, creating a random one
// (mode 0600) if the file does not exist.
func loadOrCreateSecret(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			return s, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	s := hex.EncodeToString(b)
	if err := writeFileAtomic(path, []byte(s+"\n")); err != nil {
		return "", err
	}
	return s, nil
}

// ReadControlToken reads a control token file.
func ReadControlToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("dev: control token: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("dev: control token: %s is empty", path)
	}
	return s, nil
}

// Credentials returns the client credentials of a secured cluster: TLS
// with its CA and the admin token's file (zero values with --insecure).
func (info DevClusterInfo) Credentials() (security.TLSFiles, string) {
	if info.CA == "" {
		return security.TLSFiles{}, ""
	}
	return security.TLSFiles{CAFile: info.CA}, info.AdminToken
}

// ControlClient returns a client of the cluster's control endpoint with
// its token (read from ControlToken).
func (info DevClusterInfo) ControlClient(hc *http.Client) (*DevControlClient, error) {
	tok, err := ReadControlToken(info.ControlToken)
	if err != nil {
		return nil, err
	}
	return &DevControlClient{Addr: info.Control, HTTP: hc, Token: tok}, nil
}

// HasAddress reports whether addr is an address of the cluster (a
// broker's or metadata node's gRPC or HTTP address, or a link proxy's in
// front of one); localhost stands for 127.0.0.1.
func (info DevClusterInfo) HasAddress(addr string) bool {
	if h, p, err := net.SplitHostPort(addr); err == nil && h == "localhost" {
		addr = net.JoinHostPort("127.0.0.1", p)
	}
	for _, a := range info.Addresses {
		if a == addr {
			return true
		}
	}
	for _, r := range info.Regions {
		if r.GRPC == addr || r.HTTP == addr {
			return true
		}
	}
	return false
}

// The registry of running dev clusters: a ready cluster writes its data
// directory's path into a file of DevRegistryDir (removed at Stop), so
// that the tools find its cluster file whatever its --data-dir.

// DevRegistryDir is the directory of the registry: meridian/dev under
// the user's cache directory ($XDG_CACHE_HOME or ~/.cache on Linux).
func DevRegistryDir() (string, error) {
	c, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(c, "meridian", "dev"), nil
}

// registryEntry is the registry file of the cluster in dataDir.
func registryEntry(dataDir string) (string, error) {
	dir, err := DevRegistryDir()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(dataDir))
	return filepath.Join(dir, hex.EncodeToString(sum[:8])+".path"), nil
}

// register records the cluster in the registry (best effort: a tool
// then finds it only through the default data dir).
func (d *Dev) register() {
	p, err := registryEntry(d.cfg.DataDir)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(p), 0o700)
	}
	if err == nil {
		err = writeFileAtomic(p, []byte(d.cfg.DataDir+"\n"))
	}
	if err != nil {
		d.log.Warn("dev: cannot register the cluster for the tools (they find it through the default data dir only)", "err", err)
	}
}

// unregister removes the cluster's registry file.
func (d *Dev) unregister() {
	if p, err := registryEntry(d.cfg.DataDir); err == nil {
		_ = os.Remove(p)
	}
}

// RegisteredDevClusters returns the data directories of the registered
// dev clusters whose cluster.json exists (a cluster killed with SIGKILL
// leaves its entry, but its cluster file is removed at the next start).
func RegisteredDevClusters() []string {
	dir, err := DevRegistryDir()
	if err != nil {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".path") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		dd := strings.TrimSpace(string(b))
		if _, err := os.Stat(filepath.Join(dd, DevClusterFile)); err == nil {
			out = append(out, dd)
		}
	}
	return out
}
