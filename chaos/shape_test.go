package chaos

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// sinkServer reads each connection to its end and sends the byte count
// and SHA-256 of what it read on done.
func sinkServer(t *testing.T, done chan<- [2]string) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				h := sha256.New()
				n, _ := io.Copy(h, c)
				done <- [2]string{fmt.Sprint(n), fmt.Sprintf("%x", h.Sum(nil))}
			}()
		}
	}()
	return lis.Addr().String()
}

func TestProxyBandwidthLimit(t *testing.T) {
	n := NewNetwork(nil)
	t.Cleanup(n.Close)
	done := make(chan [2]string, 1)
	p, err := n.Proxy("a/broker-0", "a/bookie-1", "127.0.0.1:0", sinkServer(t, done))
	if err != nil {
		t.Fatal(err)
	}
	const rate, size = 256 << 10, 768 << 10 // 3 s worth of bytes
	if err := n.SetShape("a/broker-0", "a/bookie-1", Shape{Bandwidth: rate}, true); err != nil {
		t.Fatal(err)
	}
	if n.Shape("a/bookie-1", "a/broker-0").Bandwidth != 0 {
		t.Fatal("oneway shape applied to the reverse direction")
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	var got [2]string
	select {
	case got = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("sink did not finish")
	}
	took := time.Since(start)
	c.Close()
	if want := [2]string{fmt.Sprint(size), fmt.Sprintf("%x", sha256.Sum256(data))}; got != want {
		t.Fatalf("sink got %v, want %v", got, want)
	}
	// The bucket lets through at most one piece (rate/20) ahead of the
	// rate: size bytes cannot cross faster than (size - piece) / rate.
	if min := time.Duration(size-rate/20) * time.Second / rate; took < min {
		t.Fatalf("%d bytes at %d B/s took %v, less than %v", size, rate, took, min)
	}
	t.Logf("%d bytes at %d B/s took %v", size, rate, took)
}

func TestProxyDropDelaysKeepingBytesAndOrder(t *testing.T) {
	n := NewNetwork(nil)
	t.Cleanup(n.Close)
	p, err := n.Proxy("a", "b", "127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	// Every chunk is dropped: each round trip pays at least one
	// retransmission delay.
	if err := n.SetShape("a", "b", Shape{Drop: 1}, false); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	rtt, err := roundTrip(t, c, r, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rtt < 2*dropDelay {
		t.Fatalf("round trip %v with every chunk dropped both ways, want >= %v", rtt, 2*dropDelay)
	}
	// Half the chunks dropped: every line comes back, in order.
	if err := n.SetShape("a", "b", Shape{Drop: 0.5}, false); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	go func() {
		for i := range 200 {
			if _, err := fmt.Fprintf(c, "line %d\n", i); err != nil {
				return
			}
			if i%20 == 0 {
				time.Sleep(time.Millisecond) // separate chunks
			}
		}
	}()
	for i := range 200 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if want := fmt.Sprintf("line %d\n", i); line != want {
			t.Fatalf("got %q, want %q", line, want)
		}
	}
	if err := n.SetShape("a", "b", Shape{Drop: 1.5}, false); err == nil {
		t.Fatal("drop 1.5 accepted")
	}
}

func TestProxySlowClose(t *testing.T) {
	n := NewNetwork(nil)
	t.Cleanup(n.Close)
	// The server says bye, closes its side and keeps reading.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	heard := make(chan string, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte("bye\n"))
		_ = c.(*net.TCPConn).CloseWrite()
		line, _ := bufio.NewReader(c).ReadString('\n')
		heard <- line
	}()
	p, err := n.Proxy("a/broker-0", "a/meta-0", "127.0.0.1:0", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	const slow = 700 * time.Millisecond
	if err := n.SetShape("a/broker-0", "a/meta-0", Shape{SlowClose: slow}, false); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || line != "bye\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	byeAt := time.Now()
	// Data still flows the other way while the close is on its way.
	if _, err := c.Write([]byte("still here\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case line := <-heard:
		if line != "still here\n" {
			t.Fatalf("server heard %q", line)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("server heard nothing")
	}
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("after bye: %v, want EOF", err)
	}
	// The bye and the close left the server together; the close came
	// at least slow later (minus the bye's own trip, which is short but
	// not zero: allow 100 ms).
	if took := time.Since(byeAt); took < slow-100*time.Millisecond {
		t.Fatalf("EOF %v after the last bytes, want about %v", took, slow)
	}
}

func TestNetworkLinksAndHealAll(t *testing.T) {
	n := NewNetwork(nil)
	t.Cleanup(n.Close)
	if _, err := n.Proxy("a", "b", "127.0.0.1:0", echoServer(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Proxy("a/broker-0", "a/bookie-0", "127.0.0.1:0", echoServer(t)); err != nil {
		t.Fatal(err)
	}
	if err := n.SetLatency("a", "b", 10*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	n.Cut("a/broker-0", "a/bookie-0", true)
	if err := n.SetShape("a", "b", Shape{Bandwidth: 1000, Drop: 0.1, SlowClose: time.Second}, false); err != nil {
		t.Fatal(err)
	}
	ls := n.Links()
	var got []string
	for _, l := range ls {
		got = append(got, fmt.Sprintf("%s>%s lat=%v cut=%v bw=%d", l.From, l.To, l.Latency, l.Cut, l.Bandwidth))
	}
	want := []string{
		"a>b lat=10ms cut=false bw=1000",
		"a/bookie-0>a/broker-0 lat=0s cut=false bw=0",
		"a/broker-0>a/bookie-0 lat=0s cut=true bw=0",
		"b>a lat=10ms cut=false bw=1000",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("links\n%v\nwant\n%v", got, want)
	}
	n.HealAll()
	for _, l := range n.Links() {
		if l.Cut || !l.Shape.IsZero() {
			t.Fatalf("after heal-all: %+v", l)
		}
		if (l.From == "a" || l.From == "b") && l.Latency != 10*time.Millisecond {
			t.Fatalf("heal-all changed latency: %+v", l)
		}
	}
}
