package security_test

import (
	"context"
	"log/slog"
)

// captureHandler records Warn-and-above messages.
type captureHandler struct{ out *[]string }

func newCaptureLogger(out *[]string) *slog.Logger { return slog.New(captureHandler{out}) }

func (h captureHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h captureHandler) Handle(_ context.Context, r slog.Record) error {
	*h.out = append(*h.out, r.Message)
	return nil
}
func (h captureHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h captureHandler) WithGroup(string) slog.Handler      { return h }
