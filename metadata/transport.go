package metadata

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	dbconfig "github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/meridianmq/meridian/internal/netguard"
	"github.com/meridianmq/meridian/security"
	"github.com/prometheus/client_golang/prometheus"
)

// The Raft transport with dial rewrite.
//
// Dragonboat's own TCP transport dials the replica's Raft address as it
// is. Between regions we want that traffic to go through addresses we
// control (the link proxy of `meridian dev` and of the chaos tests), so
// this transport listens on the node's Raft address like Dragonboat's and,
// when it dials a target, dials NodeConfig.RaftDialRewrite[target] instead
// when there is such an entry.
//
// What it relies on from Dragonboat (internal/transport): above an
// ITransport, Dragonboat keeps one bounded send queue per target and drops
// messages when it is full (Raft retries them: heartbeats, appends and
// votes are all re-sent), opens one IConnection per target and sends on it
// from one goroutine, closes it after a send error and opens a new one on
// the next message (so redial is Dragonboat's), with a circuit breaker
// against a dead target. Snapshots are split into chunks (2 MiB of data
// each) sent one by one on an ISnapshotConnection. This transport
// therefore writes synchronously, one frame at a time, each under a write
// deadline: a link that stalls (a partition stalls TCP rather than
// resetting it) makes the send fail after raftWriteTimeout, Dragonboat
// drops the connection, and its queue overflows by dropping, never by
// growing.
//
// Wire format. A connection starts with a preamble: the 4 magic bytes
// "MRT1" and one byte of kind (messages or snapshot). Then frames: one byte
// of frame type, a uint32 length, a uint32 CRC-32C of the payload (all
// big-endian) and the payload — a marshalled pb.MessageBatch or pb.Chunk.
// A snapshot connection ends with an end frame, answered by one ack byte
// once every chunk before it was handed to Dragonboat, so that Close of a
// snapshot connection returns after the receiver took the last chunk.

const (
	raftMagic = "MRT1"

	raftConnMessages byte = 1
	raftConnSnapshot byte = 2

	raftFrameBatch byte = 1
	raftFrameChunk byte = 2
	raftFrameEnd   byte = 3

	raftFrameHeader = 9
	// raftMaxFrame bounds a frame so a corrupt or hostile length cannot
	// make the receiver allocate without limit. A message batch is at most
	// 64 MiB plus one entry (Dragonboat's MaxMessageBatchSize) and an entry
	// at most max_txn_bytes (≤ 32 MiB); a chunk is 2 MiB of data.
	raftMaxFrame = 256 << 20
	// raftReadStep is how far a frame's buffer grows ahead of the bytes
	// received: a header announcing a large frame costs memory only as
	// its bytes arrive.
	raftReadStep = 1 << 20
	// raftIdleTimeout bounds the wait for the next frame of an open
	// connection (a peer's heartbeats arrive every few RTTs);
	// raftStepTimeout bounds the wait for each raftReadStep of a frame.
	raftIdleTimeout = 2 * time.Minute
	raftStepTimeout = 30 * time.Second
	// raftAcceptBackoffMax bounds the pause after a failed Accept.
	raftAcceptBackoffMax = time.Second
	// raftWriteTimeout bounds one frame write; raftDialTimeout one dial.
	raftWriteTimeout = 10 * time.Second
	raftDialTimeout  = 5 * time.Second
	// raftPreambleTimeout bounds the wait for a new connection's preamble.
	raftPreambleTimeout = 30 * time.Second
	// raftAckTimeout bounds the wait for a snapshot's end acknowledgement.
	raftAckTimeout = 30 * time.Second
	// raftKeepAlive is the TCP keep-alive period: it ends connections to
	// peers that vanished while the connection was idle.
	raftKeepAlive = 10 * time.Second
)

var raftCRC = crc32.MakeTable(crc32.Castagnoli)

// errRaftTransportClosed is returned by calls after Close.
var errRaftTransportClosed = errors.New("metadata: raft transport closed")

// TLS. With security.tls configured, every connection is mutual TLS
// (TLS 1.2+, the node's certificate both ways, verified against the
// current CA bundle) and the peer's certificate must name a metadata
// component ("metadata.<region>"): only metadata nodes speak Raft. There
// is no plaintext fallback: a plaintext peer fails the handshake. The
// handshake runs under raftPreambleTimeout (accept) or raftDialTimeout
// (dial), and the server name checked when dialing is the target's host
// (not the rewritten address's).

// raftTransportFactory builds a rewriteTransport for a NodeHost.
type raftTransportFactory struct {
	rewrite map[string]string
	tls     *security.TLS // nil: plaintext
	log     *slog.Logger
	metrics *raftTransportMetrics
	// perIP caps the connections one remote IP holds on the Raft
	// listener (max_connections_per_ip; 0: no cap), refused counts those
	// closed for it; both checked before the TLS handshake.
	perIP   int
	refused prometheus.Counter
}

var _ dbconfig.TransportFactory = (*raftTransportFactory)(nil)

// newRaftTransportFactory returns the factory of the rewriting transport;
// rewrite maps a Raft address to the address dialed instead.
// tl (nil: plaintext) secures every connection.
// perIP (0: none) caps the connections per remote IP on the listener and
// refused counts the connections closed for it.
func newRaftTransportFactory(rewrite map[string]string, tl *security.TLS, log *slog.Logger, m *raftTransportMetrics, perIP int, refused prometheus.Counter) *raftTransportFactory {
	rw := make(map[string]string, len(rewrite))
	for k, v := range rewrite {
		rw[k] = v
	}
	return &raftTransportFactory{rewrite: rw, tls: tl, log: log, metrics: m, perIP: perIP, refused: refused}
}

// Create implements dbconfig.TransportFactory.
func (f *raftTransportFactory) Create(nhc dbconfig.NodeHostConfig, mh raftio.MessageHandler, ch raftio.ChunkHandler) raftio.ITransport {
	return &rewriteTransport{
		listen:  nhc.GetListenAddress(),
		rewrite: f.rewrite,
		tls:     f.tls,
		log:     f.log.With("component", "raft-transport"),
		onBatch: mh,
		onChunk: ch,
		metrics: f.metrics,
		conns:   map[net.Conn]struct{}{},
		perIP:   f.perIP,
		refused: f.refused,
	}
}

// Validate implements dbconfig.TransportFactory: Raft addresses are
// host:port.
func (f *raftTransportFactory) Validate(addr string) bool {
	_, _, err := net.SplitHostPort(addr)
	return err == nil
}

// rewriteTransport is a raftio.ITransport over plain TCP that dials
// rewritten addresses. Safe for concurrent use.
type rewriteTransport struct {
	listen  string
	rewrite map[string]string
	tls     *security.TLS // nil: plaintext
	log     *slog.Logger
	onBatch raftio.MessageHandler
	onChunk raftio.ChunkHandler
	metrics *raftTransportMetrics
	perIP   int                // see raftTransportFactory
	refused prometheus.Counter // see raftTransportFactory

	wg sync.WaitGroup

	// mu guards the fields below.
	mu     sync.Mutex
	lis    net.Listener
	conns  map[net.Conn]struct{} // every open connection, both ways
	closed bool
}

var _ raftio.ITransport = (*rewriteTransport)(nil)

// Name implements raftio.ITransport.
func (t *rewriteTransport) Name() string {
	if t.tls != nil {
		return "meridian-rewrite-tls"
	}
	return "meridian-rewrite-tcp"
}

// checkRaftPeer accepts only a metadata component's certificate.
func checkRaftPeer(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("raft peer presented no certificate")
	}
	cn := cs.PeerCertificates[0].Subject.CommonName
	if kind, _, ok := security.ParseComponent(cn); !ok || kind != security.KindMetadata {
		return fmt.Errorf("raft peer certificate %q is not a metadata node's (want metadata.<region>)", cn)
	}
	return nil
}

// serverTLS wraps an accepted connection and completes its handshake.
func (t *rewriteTransport) serverTLS(c net.Conn) (net.Conn, error) {
	tc := tls.Server(c, t.tls.MutualServerConfig())
	ctx, cancel := context.WithTimeout(context.Background(), raftPreambleTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	if err := checkRaftPeer(tc.ConnectionState()); err != nil {
		return nil, err
	}
	return tc, nil
}

// Start implements raftio.ITransport: it listens on the Raft address.
func (t *rewriteTransport) Start() error {
	lis, err := net.Listen("tcp", t.listen)
	if err != nil {
		return fmt.Errorf("metadata: raft transport listen %s: %w", t.listen, err)
	}
	lis = netguard.LimitPerIP(lis, t.perIP, t.refused)
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		lis.Close()
		return errRaftTransportClosed
	}
	t.lis = lis
	t.mu.Unlock()
	t.wg.Add(1)
	go t.acceptLoop(lis)
	return nil
}

// Close implements raftio.ITransport: it stops listening, closes every
// connection (which unblocks any send or receive in progress) and waits
// for the receiving goroutines.
func (t *rewriteTransport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	if t.lis != nil {
		t.lis.Close()
	}
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
	return nil
}

// track adds or removes an open connection; it refuses to add one after
// Close.
func (t *rewriteTransport) track(c net.Conn, add bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !add {
		delete(t.conns, c)
		return true
	}
	if t.closed {
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *rewriteTransport) acceptLoop(lis net.Listener) {
	defer t.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := lis.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Anything else (too many open files, a connection reset
			// before it was accepted) passes: back off and go on.
			t.log.Warn("raft accept failed", "err", err, "backoff", backoff)
			time.Sleep(backoff)
			backoff = min(2*backoff, raftAcceptBackoffMax)
			continue
		}
		backoff = 5 * time.Millisecond
		if !t.track(c, true) {
			c.Close()
			return
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer func() { c.Close(); t.track(c, false) }()
			if err := t.serve(c); err != nil {
				t.log.Debug("raft connection ended", "remote", c.RemoteAddr().String(), "err", err)
			}
		}()
	}
}

// serve reads one inbound connection until it ends.
func (t *rewriteTransport) serve(c net.Conn) error {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetKeepAlive(true)
		_ = tc.SetKeepAlivePeriod(raftKeepAlive)
	}
	if t.tls != nil {
		sc, err := t.serverTLS(c)
		if err != nil {
			t.metrics.handshakes.WithLabelValues("inbound", "error").Inc()
			return err
		}
		t.metrics.handshakes.WithLabelValues("inbound", "ok").Inc()
		c = sc // closing the raw connection (Close, the defer) ends it too
	}
	r := bufio.NewReaderSize(c, 64<<10)
	var pre [len(raftMagic) + 1]byte
	_ = c.SetReadDeadline(time.Now().Add(raftPreambleTimeout))
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return fmt.Errorf("read preamble: %w", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	if string(pre[:len(raftMagic)]) != raftMagic {
		return fmt.Errorf("bad magic %q", pre[:len(raftMagic)])
	}
	kind := pre[len(raftMagic)]
	if kind != raftConnMessages && kind != raftConnSnapshot {
		return fmt.Errorf("unknown connection kind %d", kind)
	}
	for {
		typ, payload, err := readRaftFrame(r, c)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		t.metrics.frames.WithLabelValues("received", frameKind(typ)).Inc()
		t.metrics.bytes.WithLabelValues("received").Add(float64(len(payload)))
		switch {
		case kind == raftConnMessages && typ == raftFrameBatch:
			b, err := decodeRaftBatch(payload)
			if err != nil {
				t.metrics.refused.WithLabelValues("batch").Inc()
				return err
			}
			t.onBatch(b)
		case kind == raftConnSnapshot && typ == raftFrameChunk:
			ch, err := decodeRaftChunk(payload)
			if err != nil {
				t.metrics.refused.WithLabelValues("chunk").Inc()
				return err
			}
			if !t.onChunk(ch) {
				// Dragonboat rejected the chunk (stale or out of order):
				// closing makes the sender's next write fail.
				return fmt.Errorf("snapshot chunk %d of shard %d rejected", ch.ChunkId, ch.ShardID)
			}
		case kind == raftConnSnapshot && typ == raftFrameEnd:
			_ = c.SetWriteDeadline(time.Now().Add(raftWriteTimeout))
			_, err := c.Write([]byte{raftFrameEnd})
			return err
		default:
			return fmt.Errorf("frame type %d on a connection of kind %d", typ, kind)
		}
	}
}

// readRaftFrame reads one frame; a clean EOF before it is io.EOF. When
// c is not nil it sets read deadlines: raftIdleTimeout for the header,
// then raftStepTimeout for each raftReadStep of the payload. The buffer
// grows as the payload arrives (at most twice what arrived plus
// raftReadStep), so a header that lies about its length costs no more
// than the bytes actually sent.
func readRaftFrame(r io.Reader, c net.Conn) (byte, []byte, error) {
	deadline := func(d time.Duration) {
		if c != nil {
			_ = c.SetReadDeadline(time.Now().Add(d))
		}
	}
	deadline(raftIdleTimeout)
	var h [raftFrameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("truncated frame header: %w", err)
		}
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(h[1:5]))
	if n > raftMaxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes exceeds the %d byte limit", n, raftMaxFrame)
	}
	// A fresh buffer per frame: decoded messages may keep slices of it.
	payload := make([]byte, 0, min(n, raftReadStep))
	for len(payload) < n {
		deadline(raftStepTimeout)
		step := min(n-len(payload), raftReadStep)
		if cap(payload)-len(payload) < step {
			grown := make([]byte, len(payload), min(n, max(2*cap(payload), len(payload)+step)))
			copy(grown, payload)
			payload = grown
		}
		m, err := io.ReadFull(r, payload[len(payload):len(payload)+step])
		payload = payload[:len(payload)+m]
		if err != nil {
			return 0, nil, fmt.Errorf("truncated frame (%d of %d bytes): %w", len(payload), n, err)
		}
	}
	if crc32.Checksum(payload, raftCRC) != binary.BigEndian.Uint32(h[5:9]) {
		return 0, nil, errors.New("frame checksum mismatch")
	}
	return h[0], payload, nil
}

// raftNetworkTypes are the message types one replica sends another.
// Every other type (ticks, elections, quorum checks, snapshot installs,
// config change events, log queries) is produced inside the node, and
// Dragonboat indexes a table by the type: a remote message of a local
// or unknown type is refused here.
var raftNetworkTypes = map[pb.MessageType]bool{
	pb.NoOP: true, pb.Propose: true,
	pb.Replicate: true, pb.ReplicateResp: true,
	pb.RequestVote: true, pb.RequestVoteResp: true,
	pb.RequestPreVote: true, pb.RequestPreVoteResp: true,
	pb.Heartbeat: true, pb.HeartbeatResp: true,
	pb.ReadIndex: true, pb.ReadIndexResp: true,
	pb.Quiesce: true, pb.SnapshotReceived: true,
	pb.LeaderTransfer: true, pb.TimeoutNow: true, pb.RateLimit: true,
}

// decodeRaftBatch decodes and validates a received message batch before
// Dragonboat sees it: Dragonboat panics on a message to replica 0 and
// trusts shard, replica and type fields. SourceAddress is cleared: it
// would register an address for the sender, and this transport does not
// need one (addresses come from each shard's member set).
func decodeRaftBatch(payload []byte) (pb.MessageBatch, error) {
	var b pb.MessageBatch
	if err := b.Unmarshal(payload); err != nil {
		return pb.MessageBatch{}, fmt.Errorf("decode message batch: %w", err)
	}
	for i, m := range b.Requests {
		switch {
		case m.ShardID == 0:
			return pb.MessageBatch{}, fmt.Errorf("message batch request %d: shard_id 0", i)
		case m.To == 0:
			return pb.MessageBatch{}, fmt.Errorf("message batch request %d: to 0", i)
		case m.From == 0:
			return pb.MessageBatch{}, fmt.Errorf("message batch request %d: from 0", i)
		case !raftNetworkTypes[m.Type]:
			return pb.MessageBatch{}, fmt.Errorf("message batch request %d: type %d is not sent between replicas", i, m.Type)
		}
	}
	b.SourceAddress = ""
	return b, nil
}

// decodeRaftChunk decodes and validates a received snapshot chunk.
func decodeRaftChunk(payload []byte) (pb.Chunk, error) {
	var ch pb.Chunk
	if err := ch.Unmarshal(payload); err != nil {
		return pb.Chunk{}, fmt.Errorf("decode snapshot chunk: %w", err)
	}
	switch {
	case ch.ShardID == 0:
		return pb.Chunk{}, errors.New("snapshot chunk: shard_id 0")
	case ch.ReplicaID == 0:
		return pb.Chunk{}, errors.New("snapshot chunk: replica_id 0")
	case ch.From == 0:
		return pb.Chunk{}, errors.New("snapshot chunk: from 0")
	case ch.ChunkCount == 0 || ch.ChunkId >= ch.ChunkCount:
		return pb.Chunk{}, fmt.Errorf("snapshot chunk: chunk_id %d of chunk_count %d", ch.ChunkId, ch.ChunkCount)
	}
	return ch, nil
}

// dial opens an outbound connection of the given kind to target, through
// its rewrite entry if it has one.
func (t *rewriteTransport) dial(ctx context.Context, target string, kind byte) (net.Conn, error) {
	addr := target
	if to, ok := t.rewrite[target]; ok {
		addr = to
	}
	d := net.Dialer{Timeout: raftDialTimeout, KeepAlive: raftKeepAlive}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.metrics.dials.WithLabelValues("error").Inc()
		if addr != target {
			return nil, fmt.Errorf("metadata: dial raft peer %s via %s: %w", target, addr, err)
		}
		return nil, fmt.Errorf("metadata: dial raft peer %s: %w", target, err)
	}
	t.metrics.dials.WithLabelValues("ok").Inc()
	if !t.track(c, true) {
		c.Close()
		return nil, errRaftTransportClosed
	}
	if t.tls != nil {
		raw := c
		tc := tls.Client(raw, t.tls.ClientConfig(security.ServerNameOf(target)))
		hctx, cancel := context.WithTimeout(ctx, raftDialTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err == nil {
			err = checkRaftPeer(tc.ConnectionState())
		}
		if err != nil {
			t.metrics.handshakes.WithLabelValues("outbound", "error").Inc()
			raw.Close()
			t.track(raw, false)
			return nil, fmt.Errorf("metadata: raft peer %s: tls: %w", target, err)
		}
		t.metrics.handshakes.WithLabelValues("outbound", "ok").Inc()
		t.untrackSwap(raw, tc)
		c = tc
	}
	pre := append([]byte(raftMagic), kind)
	_ = c.SetWriteDeadline(time.Now().Add(raftWriteTimeout))
	if _, err := c.Write(pre); err != nil {
		c.Close()
		t.track(c, false)
		return nil, fmt.Errorf("metadata: raft peer %s: write preamble: %w", target, err)
	}
	return c, nil
}

// untrackSwap replaces a tracked raw connection by its TLS wrapper, so
// that Close closes the wrapper (which closes the raw one).
func (t *rewriteTransport) untrackSwap(raw, wrapped net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.conns[raw]; ok {
		delete(t.conns, raw)
		t.conns[wrapped] = struct{}{}
	}
}

// GetConnection implements raftio.ITransport.
func (t *rewriteTransport) GetConnection(ctx context.Context, target string) (raftio.IConnection, error) {
	c, err := t.dial(ctx, target, raftConnMessages)
	if err != nil {
		return nil, err
	}
	return &raftFrameConn{t: t, c: c}, nil
}

// GetSnapshotConnection implements raftio.ITransport.
func (t *rewriteTransport) GetSnapshotConnection(ctx context.Context, target string) (raftio.ISnapshotConnection, error) {
	c, err := t.dial(ctx, target, raftConnSnapshot)
	if err != nil {
		return nil, err
	}
	return &raftFrameConn{t: t, c: c, snapshot: true}, nil
}

// raftFrameConn is an outbound connection. Dragonboat uses each from one
// goroutine at a time; Close may come from another (transport Close).
type raftFrameConn struct {
	t        *rewriteTransport
	c        net.Conn
	snapshot bool
	// failed is set after a write error: the stream may hold half a frame.
	failed bool
	once   sync.Once
}

var (
	_ raftio.IConnection         = (*raftFrameConn)(nil)
	_ raftio.ISnapshotConnection = (*raftFrameConn)(nil)
)

func (fc *raftFrameConn) writeFrame(typ byte, payload []byte) error {
	if fc.failed {
		return errors.New("metadata: raft connection failed earlier")
	}
	if len(payload) > raftMaxFrame {
		return fmt.Errorf("metadata: raft frame of %d bytes exceeds the %d byte limit", len(payload), raftMaxFrame)
	}
	var h [raftFrameHeader]byte
	h[0] = typ
	binary.BigEndian.PutUint32(h[1:5], uint32(len(payload)))
	binary.BigEndian.PutUint32(h[5:9], crc32.Checksum(payload, raftCRC))
	_ = fc.c.SetWriteDeadline(time.Now().Add(raftWriteTimeout))
	bufs := net.Buffers{h[:], payload}
	if _, err := bufs.WriteTo(fc.c); err != nil {
		fc.failed = true
		return fmt.Errorf("metadata: raft send to %s: %w", fc.c.RemoteAddr(), err)
	}
	fc.t.metrics.frames.WithLabelValues("sent", frameKind(typ)).Inc()
	fc.t.metrics.bytes.WithLabelValues("sent").Add(float64(len(payload)))
	return nil
}

// SendMessageBatch implements raftio.IConnection.
func (fc *raftFrameConn) SendMessageBatch(batch pb.MessageBatch) error {
	b, err := batch.Marshal()
	if err != nil {
		return fmt.Errorf("metadata: encode message batch: %w", err)
	}
	return fc.writeFrame(raftFrameBatch, b)
}

// SendChunk implements raftio.ISnapshotConnection.
func (fc *raftFrameConn) SendChunk(chunk pb.Chunk) error {
	b, err := chunk.Marshal()
	if err != nil {
		return fmt.Errorf("metadata: encode snapshot chunk: %w", err)
	}
	return fc.writeFrame(raftFrameChunk, b)
}

// Close implements raftio.IConnection and raftio.ISnapshotConnection. A
// snapshot connection first sends the end frame and waits (bounded) for
// the receiver's acknowledgement.
func (fc *raftFrameConn) Close() {
	fc.once.Do(func() {
		if fc.snapshot && !fc.failed {
			if err := fc.writeFrame(raftFrameEnd, nil); err == nil {
				var ack [1]byte
				_ = fc.c.SetReadDeadline(time.Now().Add(raftAckTimeout))
				if _, err := io.ReadFull(fc.c, ack[:]); err != nil {
					fc.t.log.Debug("snapshot end not acknowledged", "remote", fc.c.RemoteAddr().String(), "err", err)
				}
			}
		}
		fc.c.Close()
		fc.t.track(fc.c, false)
	})
}

// raftTransportMetrics count the rewriting transport's traffic. Labels are
// fixed sets (direction, kind, result).
type raftTransportMetrics struct {
	frames *prometheus.CounterVec
	bytes  *prometheus.CounterVec
	dials  *prometheus.CounterVec
	// handshakes counts TLS handshakes (security.tls only).
	handshakes *prometheus.CounterVec
	// refused counts received frames refused by validation.
	refused *prometheus.CounterVec
}

func newRaftTransportMetrics(reg prometheus.Registerer) *raftTransportMetrics {
	m := &raftTransportMetrics{
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_metadata_raft_transport_frames_total",
			Help: "Frames of the Raft transport with dial rewrite, by direction (sent, received) and kind (batch, chunk).",
		}, []string{"direction", "kind"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_metadata_raft_transport_bytes_total",
			Help: "Payload bytes of the Raft transport with dial rewrite, by direction (sent, received).",
		}, []string{"direction"}),
		dials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_metadata_raft_transport_dials_total",
			Help: "Outbound Raft connections attempted by the transport with dial rewrite, by result (ok, error).",
		}, []string{"result"}),
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_metadata_raft_transport_tls_handshakes_total",
			Help: "TLS handshakes of the Raft transport (security.tls), by direction (inbound, outbound) and result (ok, error: bad or missing certificate, plaintext peer, not a metadata node).",
		}, []string{"direction", "result"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_metadata_raft_transport_refused_frames_total",
			Help: "Received Raft frames refused before Dragonboat saw them (zero shard or replica ID, a message type replicas do not send, an undecodable payload), by kind (batch, chunk); the connection is closed.",
		}, []string{"kind"}),
	}
	if reg != nil {
		for _, c := range []**prometheus.CounterVec{&m.frames, &m.bytes, &m.dials, &m.handshakes, &m.refused} {
			// A node restarted in the same process registers again: keep
			// counting on the collector already registered.
			if err := reg.Register(*c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if errors.As(err, &are) {
					if ex, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
						*c = ex
					}
				}
			}
		}
	}
	return m
}

func frameKind(typ byte) string {
	switch typ {
	case raftFrameBatch:
		return "batch"
	case raftFrameChunk:
		return "chunk"
	}
	return "end"
}
