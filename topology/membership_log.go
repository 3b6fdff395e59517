package topology

import (
	"bytes"
	"context"
	"log"
	"log/slog"
)

// newMemberlistLogger routes memberlist's standard-library logger to slog.
// memberlist prefixes lines with "[DEBUG]", "[INFO]", "[WARN]" or "[ERR]";
// the prefix picks the slog level so a quiet logger stays quiet.
func newMemberlistLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l: l.With("component", "memberlist")}, "", 0)
}

type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	for _, lv := range []struct {
		tag   string
		level slog.Level
	}{{"[DEBUG]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo}, {"[WARN]", slog.LevelWarn}, {"[ERR]", slog.LevelError}} {
		if i := bytes.Index(line, []byte(lv.tag)); i >= 0 {
			level = lv.level
			line = bytes.TrimSpace(line[i+len(lv.tag):])
			break
		}
	}
	if w.l.Enabled(context.Background(), level) {
		w.l.Log(context.Background(), level, string(line))
	}
	return len(p), nil
}
