package netguard

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"
)

// HTTPServer returns the *http.Server every Meridian HTTP listener uses:
// read, write and idle timeouts and the header size from l, so a slow
// body, a slow reader or an idle keep-alive connection is cut off.
func (l Limits) HTTPServer(h http.Handler, errLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(httpReadHeaderTimeout, l.HTTPReadTimeout),
		ReadTimeout:       l.HTTPReadTimeout,
		WriteTimeout:      l.HTTPWriteTimeout,
		IdleTimeout:       l.HTTPIdleTimeout,
		MaxHeaderBytes:    l.HTTPMaxHeaderBytes,
		ErrorLog:          errLog,
	}
}

// LiftWriteTimeout lets the handler serving w run and write past the
// server's HTTPWriteTimeout (a long admin action of an authenticated
// caller). It reports whether the server supports it.
func LiftWriteTimeout(w http.ResponseWriter) bool {
	return http.NewResponseController(w).SetWriteDeadline(time.Time{}) == nil
}

// ErrBodyTooLarge is returned (wrapped, naming the limit) by ReadBody.
var ErrBodyTooLarge = errors.New("request body too large")

// ReadBody reads r's body, at most limit bytes. A longer body is an error
// wrapping ErrBodyTooLarge that names the limit, and the connection is
// closed after the answer (http.MaxBytesReader) rather than drained.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, fmt.Errorf("%w: over the limit of %d bytes", ErrBodyTooLarge, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("read request body: %w", err)
	}
	return b, nil
}

// DefaultHTTPServer is HTTPServer with the default limits, for listeners
// whose component has no Limits of its own (the pprof and `meridian dev`
// control listeners).
func DefaultHTTPServer(h http.Handler, errLog *log.Logger) *http.Server {
	return DefaultLimits(1).HTTPServer(h, errLog)
}
