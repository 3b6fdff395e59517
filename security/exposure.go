package security

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
)

// ErrExposed refuses a listener reachable from other hosts without TLS
// and authentication.
var ErrExposed = errors.New("security: listener exposed without TLS and authentication")

// Loopback reports whether the listen address (host:port) binds only the
// loopback interface: 127.0.0.0/8, ::1 or "localhost". An empty host or
// 0.0.0.0 binds every interface.
func Loopback(listen string) bool {
	host := hostOf(listen)
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// CheckExposure refuses (ErrExposed, naming field and the missing
// settings) a listen address that is not loopback unless c has TLS and
// auth enabled, or c.Insecure is set — then it logs a warning and returns
// nil. field names the listen address in the config (e.g.
// "broker.grpc_address"); an empty listen is not a listener.
func CheckExposure(field, listen string, c Config, log *slog.Logger) error {
	if listen == "" || Loopback(listen) || (c.Enabled() && c.Auth.Enabled) {
		return nil
	}
	var missing []string
	if !c.Enabled() {
		missing = append(missing, "security.tls")
	}
	if !c.Auth.Enabled {
		missing = append(missing, "security.auth.enabled")
	}
	if c.Insecure {
		if log != nil {
			log.Warn("INSECURE: listening on a non-loopback address without TLS and authentication (security.insecure is set)",
				"field", field, "listen", listen, "missing", strings.Join(missing, ", "))
		}
		return nil
	}
	return fmt.Errorf("%w: %s %q is not a loopback address and %s not configured; configure them, listen on 127.0.0.1, or set security.insecure: true (--insecure)",
		ErrExposed, field, listen, strings.Join(missing, " and ")+map[bool]string{true: " are", false: " is"}[len(missing) > 1])
}
