package region

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region/regiontest"
	"github.com/meridianmq/meridian/security"
	"github.com/meridianmq/meridian/security/securitytest"
	"google.golang.org/grpc"
)

// rotationPKI is the key material of the rotation test: every
// component's TLS files (kept across restarts, rewritten in place), the
// client's CA file, the token public key file and the client's token
// file.
type rotationPKI struct {
	t              *testing.T
	oldCA, newCA   *securitytest.CA
	pubFile        string
	oldKey, newKey any
	oldPub, newPub []byte
	tokenFile      string
	clientCA       string

	mu    sync.Mutex
	files map[string]security.TLSFiles // by role and index
	roles map[string]string
}

func newRotationPKI(t *testing.T) *rotationPKI {
	p := &rotationPKI{t: t, oldCA: securitytest.NewCA(t, "old-ca"), newCA: securitytest.NewCA(t, "new-ca"),
		files: map[string]security.TLSFiles{}, roles: map[string]string{}}
	dir := t.TempDir()
	oldPubFile, oldKey := securitytest.KeyPairFiles(t, "ES256")
	newPubFile, newKey := securitytest.KeyPairFiles(t, "ES256")
	p.oldKey, p.newKey = oldKey, newKey
	p.oldPub, _ = os.ReadFile(oldPubFile)
	p.newPub, _ = os.ReadFile(newPubFile)
	p.pubFile = filepath.Join(dir, "token-public.pem")
	securitytest.WriteFile(t, p.pubFile, p.oldPub)
	p.tokenFile = filepath.Join(dir, "client.token")
	securitytest.WriteFile(t, p.tokenFile, []byte(p.token(oldKey, "producer")))
	p.clientCA = filepath.Join(dir, "client-ca.pem")
	securitytest.WriteBundle(t, p.clientCA, p.oldCA)
	return p
}

func (p *rotationPKI) token(key any, role string) string {
	s, err := security.SignToken(key, "ES256", role, time.Hour)
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// config is a component's security block; a restarted component gets its
// files back (rotated in place).
func (p *rotationPKI) config(kind string, i int) security.Config {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := fmt.Sprintf("%s-%d", kind, i)
	f, ok := p.files[id]
	if !ok {
		f = p.oldCA.Files(security.ComponentRole(kind, regiontest.Region))
		p.files[id] = f
		p.roles[id] = security.ComponentRole(kind, regiontest.Region)
	}
	// The token roles are superusers (authorization is not under test).
	return security.Config{TLS: f, ReloadPollInterval: 500 * time.Millisecond, Superusers: []string{"producer", "probe", "probe.new", "probe.old"},
		Auth: security.AuthConfig{Enabled: true, Keys: security.TokenKeys{PublicKeyFile: p.pubFile}}}
}

// bundles writes the CA bundle of every component and of the client.
func (p *rotationPKI) bundles(cas ...*securitytest.CA) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.files {
		securitytest.WriteBundle(p.t, f.CAFile, cas...)
	}
	securitytest.WriteBundle(p.t, p.clientCA, cas...)
}

// leaves gives every component a new certificate of the new CA.
func (p *rotationPKI) leaves() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, f := range p.files {
		securitytest.WriteLeaf(p.t, f, p.newCA.Issue(p.roles[id]))
	}
}

// probe calls the broker's and every bookie's gRPC service once, on new
// connections, with a client of the given TLS files and token.
func probe(c *regiontest.Cluster, f security.TLSFiles, tok string) error {
	var src security.TokenSource
	if tok != "" {
		src = security.StaticToken(tok)
	}
	rt, err := security.ClientRuntime(f, src, nil)
	if err != nil {
		return err
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, addr := range c.Addrs() {
		cc, err := grpc.NewClient(addr, rt.DialOptions("")...)
		if err != nil {
			return err
		}
		_, err = clientv1.NewAdminClient(cc).ListTenants(ctx, &clientv1.ListTenantsRequest{})
		cc.Close()
		if err != nil {
			return fmt.Errorf("broker %s: %w", addr, err)
		}
	}
	for _, addr := range c.Bookies.Addrs() {
		cc, err := grpc.NewClient(addr, rt.DialOptions("")...)
		if err != nil {
			return err
		}
		_, err = bookiev1.NewBookieClient(cc).GetInfo(ctx, &bookiev1.GetInfoRequest{})
		cc.Close()
		if err != nil {
			return fmt.Errorf("bookie %s: %w", addr, err)
		}
	}
	return nil
}

func pollFor(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSecurityRotationUnderLoad rotates the CA (new CA added to every
// bundle, then new leaf certificates of it everywhere, then the old CA
// removed) and the JWT verification key (new key added, the client's token
// file switched to a token of it, old key removed) while a producer
// sends, without restarting anything for the rotation itself; brokers are
// killed and restarted in between so that the client reconnects with the
// rotated material. Nothing acknowledged is lost; duplicates are counted.
func TestSecurityRotationUnderLoad(t *testing.T) {
	pki := newRotationPKI(t)
	c := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 2, Security: pki.config, KeepAddrs: true})
	const topic = "public/default/rotation"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := client.New(ctx, client.Options{URL: strings.Join(c.Addrs(), ","),
		TLSFiles: security.TLSFiles{CAFile: pki.clientCA}, TokenFile: pki.tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(context.Background())
	co, err := cl.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "check", InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	p, err := cl.NewProducer(ctx, client.ProducerOptions{Topic: topic, Name: "rotating", SendTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu    sync.Mutex
		acked []string
		fails []error
	)
	var sent atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			payload := fmt.Sprintf("m%06d", i)
			_, err := p.Send(ctx, &client.Message{Payload: []byte(payload)})
			mu.Lock()
			if err == nil {
				acked = append(acked, payload)
			} else {
				fails = append(fails, err)
			}
			mu.Unlock()
			sent.Add(1)
		}
	}()
	ackedN := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	progress := func(what string) {
		t.Helper()
		from := ackedN()
		pollFor(t, 2*time.Minute, what, func() error {
			if ackedN() < from+20 {
				return fmt.Errorf("%d acknowledged since", ackedN()-from)
			}
			return nil
		})
	}
	restartOwner := func(what string) {
		t.Helper()
		owner := -1
		pollFor(t, time.Minute, "the topic's owner", func() error {
			for i := range 2 {
				if slices.Contains(c.Broker(i).OwnedTopics(), topic) {
					owner = i
					return nil
				}
			}
			return fmt.Errorf("no broker owns %s", topic)
		})
		c.Kill(owner)
		progress(what + ": producing through the other broker")
		c.Restart(owner)
	}
	progress("first messages")
	newProbe := func() security.TLSFiles { return pki.newCA.Files("probe.new", pki.oldCA) }

	// 1. The new CA joins every bundle: a new-CA client certificate is
	// accepted everywhere.
	pki.bundles(pki.oldCA, pki.newCA)
	pollFor(t, time.Minute, "new CA trusted everywhere", func() error { return probe(c, newProbe(), "") })
	progress("after the CA bundle update")

	// 2. New leaf certificates of the new CA: a client trusting only the
	// new CA connects.
	pki.leaves()
	newOnly := pki.newCA.CAOnly()
	pollFor(t, time.Minute, "new leaf certificates served", func() error { return probe(c, newOnly, pki.token(pki.oldKey, "probe")) })
	progress("after the leaf rotation")

	// 3. The new JWT key joins the key file; the client's token file moves
	// to a token of the new key.
	securitytest.WriteFile(t, pki.pubFile, append(slices.Clone(pki.oldPub), pki.newPub...))
	pollFor(t, time.Minute, "new token key accepted", func() error { return probe(c, newOnly, pki.token(pki.newKey, "probe")) })
	securitytest.WriteFile(t, pki.tokenFile, []byte(pki.token(pki.newKey, "producer")))
	restartOwner("first restart")
	progress("after the first restart")

	// 4. The old CA and the old key leave.
	pki.bundles(pki.newCA)
	securitytest.WriteFile(t, pki.pubFile, pki.newPub)
	pollFor(t, time.Minute, "old CA no longer trusted", func() error {
		if probe(c, pki.oldCA.Files("probe.old", pki.newCA), "") == nil {
			return fmt.Errorf("an old-CA certificate is still accepted")
		}
		return nil
	})
	pollFor(t, time.Minute, "old token key no longer accepted", func() error {
		if probe(c, newOnly, pki.token(pki.oldKey, "probe")) == nil {
			return fmt.Errorf("a token of the old key is still accepted")
		}
		return nil
	})
	restartOwner("second restart")
	progress("with only the new material")

	close(stop)
	<-done
	mu.Lock()
	want := slices.Clone(acked)
	nfail := len(fails)
	var firstFail error
	if nfail > 0 {
		firstFail = fails[0]
	}
	mu.Unlock()
	t.Logf("%d sends, %d acknowledged, %d failed (first: %v)", sent.Load(), len(want), nfail, firstFail)

	seen := map[string]int{}
	missing := func() int {
		n := 0
		for _, m := range want {
			if seen[m] == 0 {
				n++
			}
		}
		return n
	}
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer rcancel()
	for missing() > 0 {
		m, err := co.Receive(rctx)
		if err != nil {
			t.Fatalf("receive: %v; %d acknowledged messages missing", err, missing())
		}
		seen[string(m.Payload)]++
		_ = co.Ack(rctx, m.ID)
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	t.Logf("all %d acknowledged messages received; %d duplicates", len(want), dups)
}
