// Command hostile measures what hostile or broken peers cost a running
// `meridian standalone --secure` (issue 22): it starts one, then, one
// attack at a time, records the process's RSS before the attack, its peak
// while the attack holds, and after the attacker left:
//
//   - idle: N TCP connections to the broker's gRPC port that never start
//     the TLS handshake (a stranger);
//   - tls-idle: N connections that complete TLS and then send nothing;
//   - streams: an authenticated client that opens S Consume streams on a
//     topic with a backlog, grants each a large flow, and never reads;
//   - big-producer: an authenticated producer that sends 5 MiB messages
//     as fast as the stream takes them and never reads its receipts.
//
// Usage: go run ./bench/hostile [-bin meridian] [-conns 1000] [-streams 200]
// [-hold 10s]. It prints one JSON line per attack. The standalone is the
// whole region in one process (broker, bookie, metadata), so its RSS is
// the broker's plus its storage's.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

type result struct {
	Attack   string  `json:"attack"`
	Detail   string  `json:"detail"`
	BeforeMB float64 `json:"rss_before_mib"`
	PeakMB   float64 `json:"rss_peak_mib"`
	AfterMB  float64 `json:"rss_after_mib"`
	Note     string  `json:"note,omitempty"`
}

func main() {
	bin := flag.String("bin", "", "meridian binary (default: go build ./cmd/meridian)")
	conns := flag.Int("conns", 1000, "idle connections")
	streams := flag.Int("streams", 200, "consume streams that never read")
	backlog := flag.Int("backlog", 500, "64 KiB messages in the streams' backlog (past the tail cache's 32 MiB per topic they are read from the bookie)")
	hold := flag.Duration("hold", 10*time.Second, "how long each attack holds")
	only := flag.String("only", "", "comma-separated attacks to run (default all)")
	flag.Parse()
	log.SetFlags(0)

	work, err := os.MkdirTemp("", "meridian-hostile")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(work)
	if *bin == "" {
		*bin = filepath.Join(work, "meridian")
		if out, err := exec.Command("go", "build", "-o", *bin, "./cmd/meridian").CombinedOutput(); err != nil {
			log.Fatalf("go build: %v\n%s", err, out)
		}
	}
	grpcAddr, httpAddr := freeAddr(), freeAddr()
	cmd := exec.Command(*bin, "standalone", "--secure", "--data-dir", filepath.Join(work, "data"), "--grpc", grpcAddr, "--http", httpAddr)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	secDir := filepath.Join(work, "data", "security")

	ctx := context.Background()
	conn, tlsConf, err := dialSecure(ctx, grpcAddr, secDir)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	cl := clientv1.NewMeridianClient(conn)

	want := map[string]bool{}
	for _, a := range strings.Split(*only, ",") {
		if a != "" {
			want[a] = true
		}
	}
	run := func(name string) bool { return len(want) == 0 || want[name] }
	enc := json.NewEncoder(os.Stdout)
	emit := func(r result) { _ = enc.Encode(r) }

	// Warm up: a topic with a backlog of 64 KiB messages for the streams.
	topic := "public/default/hostile"
	if err := produce(ctx, cl, topic, 64<<10, *backlog, true); err != nil {
		log.Fatalf("fill %s: %v", topic, err)
	}
	settle(pid)

	if run("idle") {
		emit(measure(pid, "idle", fmt.Sprintf("%d TCP connections, no TLS handshake", *conns), *hold, func(stop <-chan struct{}) string {
			cs := openIdle(grpcAddr, *conns, nil)
			<-stop
			return closeAll(cs)
		}))
	}
	if run("tls-idle") {
		emit(measure(pid, "tls-idle", fmt.Sprintf("%d TLS connections, nothing sent after the handshake", *conns), *hold, func(stop <-chan struct{}) string {
			cs := openIdle(grpcAddr, *conns, tlsConf)
			<-stop
			return closeAll(cs)
		}))
	}
	if run("streams") {
		emit(measure(pid, "streams", fmt.Sprintf("%d Consume streams on one connection, flow 100000 each, never read; backlog %d x 64 KiB", *streams, *backlog), *hold, func(stop <-chan struct{}) string {
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			opened := 0
			var firstErr error
			for i := range *streams {
				st, err := cl.Consume(sctx)
				if err == nil {
					err = st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Subscribe{Subscribe: &clientv1.Subscribe{
						Topic: topic, Subscription: fmt.Sprintf("never-reads-%d", i), Type: clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE,
						InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST, NonDurable: true}}})
				}
				if err == nil {
					err = st.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Flow{Flow: &clientv1.Flow{Permits: 100000}}})
				}
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				opened++
			}
			<-stop
			note := fmt.Sprintf("%d streams opened", opened)
			if firstErr != nil {
				note += "; first refusal: " + firstErr.Error()
			}
			return note
		}))
	}
	if run("big-producer") {
		emit(measure(pid, "big-producer", "one producer, 5 MiB messages as fast as the stream takes them, receipts never read", *hold, func(stop <-chan struct{}) string {
			pctx, cancel := context.WithCancel(ctx)
			var sent atomic.Int64
			var perr error
			done := make(chan struct{})
			go func() {
				defer close(done)
				perr = produceUnread(pctx, cl, "public/default/hostile-big", 5<<20-1024, &sent)
			}()
			<-stop
			cancel()
			<-done
			note := fmt.Sprintf("%d messages sent", sent.Load())
			if perr != nil && !errors.Is(perr, context.Canceled) {
				note += "; " + perr.Error()
			}
			return note
		}))
	}
}

// measure runs attack until hold passes, sampling RSS, then waits for the
// process to settle after the attacker left.
func measure(pid int, name, detail string, hold time.Duration, attack func(stop <-chan struct{}) string) result {
	r := result{Attack: name, Detail: detail, BeforeMB: rssMiB(pid)}
	stop := make(chan struct{})
	var peak atomic.Int64
	var wg sync.WaitGroup
	sampling := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if v := int64(rssMiB(pid) * 1024); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-sampling:
				return
			case <-t.C:
			}
		}
	}()
	noteCh := make(chan string, 1)
	go func() { noteCh <- attack(stop) }()
	time.Sleep(hold)
	close(stop)
	r.Note = <-noteCh
	close(sampling)
	wg.Wait()
	r.PeakMB = float64(peak.Load()) / 1024
	settle(pid)
	r.AfterMB = rssMiB(pid)
	return r
}

// settle waits for RSS to stop falling (at most 20 s): the Go runtime
// returns freed memory to the OS over a few seconds.
func settle(pid int) {
	last := rssMiB(pid)
	for range 20 {
		time.Sleep(time.Second)
		now := rssMiB(pid)
		if now >= last-1 {
			return
		}
		last = now
	}
}

func rssMiB(pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return float64(kb) / 1024
		}
	}
	return -1
}

func openIdle(addr string, n int, tc *tls.Config) []net.Conn {
	var cs []net.Conn
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			continue
		}
		if tc != nil {
			t := tls.Client(c, tc)
			_ = t.SetDeadline(time.Now().Add(5 * time.Second))
			if err := t.Handshake(); err != nil {
				c.Close()
				continue
			}
			_ = t.SetDeadline(time.Time{})
			c = t
		}
		cs = append(cs, c)
	}
	return cs
}

// closeAll closes the connections and says how many the server had
// already closed.
func closeAll(cs []net.Conn) string {
	closed := 0
	for _, c := range cs {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil && !isTimeout(err) {
			closed++
		}
		c.Close()
	}
	return fmt.Sprintf("%d connections held, %d already closed by the server", len(cs), closed)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return true }

// dialSecure waits for the standalone's security files and dials its
// broker with TLS and the admin token.
func dialSecure(ctx context.Context, addr, secDir string) (*grpc.ClientConn, *tls.Config, error) {
	deadline := time.Now().Add(3 * time.Minute)
	var ca, tok []byte
	var err error
	for time.Now().Before(deadline) {
		ca, err = os.ReadFile(filepath.Join(secDir, "ca.pem"))
		if err == nil {
			tok, err = os.ReadFile(filepath.Join(secDir, "admin.token"))
		}
		if err == nil && len(tok) > 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	host, _, _ := net.SplitHostPort(addr)
	tc := &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)),
		grpc.WithPerRPCCredentials(bearer(strings.TrimSpace(string(tok)))),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return nil, nil, err
	}
	// Wait until the broker answers.
	cl := clientv1.NewMeridianClient(conn)
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = cl.Lookup(metadata.NewOutgoingContext(cctx, nil), &clientv1.LookupRequest{Topic: "public/default/hostile"})
		cancel()
		if err == nil {
			return conn, tc, nil
		}
		time.Sleep(300 * time.Millisecond)
	}
	return nil, nil, fmt.Errorf("broker %s not ready: %w", addr, err)
}

// produce writes n messages of size bytes and waits for every receipt.
func produce(ctx context.Context, cl clientv1.MeridianClient, topic string, size, n int, wait bool) error {
	st, payload, usize, err := openProducer(ctx, cl, topic, size)
	if err != nil {
		return err
	}
	for i := range n {
		if err := st.Send(sendReq(int64(i), payload, usize)); err != nil {
			return err
		}
	}
	if wait {
		for range n {
			r, err := st.Recv()
			if err != nil {
				return err
			}
			if rc := r.GetReceipt(); rc == nil || rc.GetError() != nil {
				return fmt.Errorf("receipt: %v", r)
			}
		}
	}
	return st.CloseSend()
}

// produceUnread sends size-byte messages until ctx ends, never reading.
func produceUnread(ctx context.Context, cl clientv1.MeridianClient, topic string, size int, sent *atomic.Int64) error {
	st, payload, usize, err := openProducer(ctx, cl, topic, size)
	if err != nil {
		return err
	}
	for i := int64(0); ; i++ {
		if err := st.Send(sendReq(i, payload, usize)); err != nil {
			return err
		}
		sent.Add(1)
	}
}

// openProducer opens a producer stream on topic and encodes one message
// of size bytes to send on it.
func openProducer(ctx context.Context, cl clientv1.MeridianClient, topic string, size int) (clientv1.Meridian_ProduceClient, []byte, int64, error) {
	st, err := cl.Produce(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{Topic: topic}}}); err != nil {
		return nil, nil, 0, err
	}
	if _, err := st.Recv(); err != nil {
		return nil, nil, 0, err
	}
	payload, usize, err := onePayload(size)
	return st, payload, usize, err
}

func onePayload(size int) ([]byte, int64, error) {
	b := &clientv1.Batch{Messages: []*clientv1.SingleMessage{{Payload: make([]byte, size)}}}
	return wire.EncodeBatch(b, clientv1.CompressionType_COMPRESSION_TYPE_NONE)
}

func sendReq(seq int64, payload []byte, usize int64) *clientv1.ProduceRequest {
	return &clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Send{Send: &clientv1.Send{
		SequenceId: seq, NumMessages: 1, UncompressedSize: usize, PublishTimeMs: time.Now().UnixMilli(), Payload: payload}}}
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
