package netguard_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/internal/netguard"
	"github.com/meridianmq/meridian/internal/netguard/netguardtest"
)

func shortLimits() netguard.Limits {
	l := netguard.DefaultLimits(1)
	l.HTTPReadTimeout = 200 * time.Millisecond
	l.HTTPIdleTimeout = 200 * time.Millisecond
	return l
}

// TestHTTPSlowBodyCut: a body that never arrives is cut at the read
// timeout, whether the handler reads it or not.
func TestHTTPSlowBodyCut(t *testing.T) {
	lis := listen(t)
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/read", func(w http.ResponseWriter, r *http.Request) {
		if _, err := netguard.ReadBody(w, r, 2<<20); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
	})
	srv := shortLimits().HTTPServer(mux, nil)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	netguardtest.CheckSlowBodyCut(t, lis.Addr().String(), "/read")
	netguardtest.CheckSlowBodyCut(t, lis.Addr().String(), "/healthz")
}

// TestHTTPIdleCut: an idle keep-alive connection is closed at the idle
// timeout.
func TestHTTPIdleCut(t *testing.T) {
	lis := listen(t)
	serveHTTP(t, lis, shortLimits())
	netguardtest.CheckIdleCut(t, lis.Addr().String())
}

// TestReadBodyNamesLimit: a body over the limit is refused with an error
// naming the limit; one at the limit is read whole.
func TestReadBodyNamesLimit(t *testing.T) {
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat("x", 101)))
	_, err := netguard.ReadBody(w, r, 100)
	if !errors.Is(err, netguard.ErrBodyTooLarge) || !strings.Contains(err.Error(), "100 bytes") {
		t.Fatalf("ReadBody over the limit: %v, want ErrBodyTooLarge naming 100 bytes", err)
	}
	r = httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat("x", 100)))
	b, err := netguard.ReadBody(w, r, 100)
	if err != nil || len(b) != 100 {
		t.Fatalf("ReadBody at the limit: %d bytes, %v", len(b), err)
	}
}

// TestLiftWriteTimeout: a handler that lifts the write deadline answers
// after the server's write timeout; one that does not is cut.
func TestLiftWriteTimeout(t *testing.T) {
	lis := listen(t)
	l := netguard.DefaultLimits(1)
	l.HTTPWriteTimeout = 100 * time.Millisecond
	release, started := make(chan struct{}), make(chan struct{}, 2)
	mux := http.NewServeMux()
	slow := func(lift bool) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if lift && !netguard.LiftWriteTimeout(w) {
				t.Error("LiftWriteTimeout not supported")
			}
			started <- struct{}{}
			<-release
			_, _ = w.Write([]byte("done"))
		}
	}
	mux.HandleFunc("/lifted", slow(true))
	mux.HandleFunc("/cut", slow(false))
	srv := l.HTTPServer(mux, nil)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + lis.Addr().String()
	type res struct {
		body string
		err  error
	}
	get := func(path string) chan res {
		ch := make(chan res, 1)
		go func() {
			resp, err := http.Get(base + path)
			if err != nil {
				ch <- res{err: err}
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			ch <- res{string(b), err}
		}()
		return ch
	}
	lifted, cut := get("/lifted"), get("/cut")
	// Release both once the write timeout has certainly passed for both:
	// the server sets the deadline before it calls the handler.
	<-started
	<-started
	time.Sleep(3 * l.HTTPWriteTimeout)
	close(release)
	if r := <-lifted; r.err != nil || r.body != "done" {
		t.Fatalf("lifted handler: %q %v, want done", r.body, r.err)
	}
	if r := <-cut; r.err == nil && r.body == "done" {
		t.Fatal("handler past the write timeout answered; want the connection cut")
	}
}
