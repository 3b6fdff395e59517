package broker

import (
	"encoding/json"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// HTTP admin hardening (issue 21): a web page must not be able to drive
// the admin API of a broker it can reach (on loopback, say).
//
//   - Mutating methods (every admin method but Get*/List*) take POST only
//     (405 otherwise); every POST needs Content-Type application/json (415
//     otherwise), which a cross-site form or a "simple" fetch cannot send
//     without a CORS preflight the broker never grants.
//   - The Host header must name an allowed host (broker.http_allowed_hosts;
//     default the HTTP listen host, the advertised HTTP host, localhost,
//     127.0.0.1 and ::1) or be an IP literal (DNS rebinding needs a name):
//     421 otherwise.
//   - An Origin header, when present, must be the request's own host or
//     an allowed host: 403 otherwise.
//   - Authentication and the rule of each method are those of its RPC
//     (Authorization: Bearer, or the client certificate).

// httpAllowedHosts returns the allowed Host names (lower case, no port).
func (s *Server) httpAllowedHosts() []string {
	if len(s.cfg.HTTPAllowedHosts) > 0 {
		out := make([]string, 0, len(s.cfg.HTTPAllowedHosts))
		for _, h := range s.cfg.HTTPAllowedHosts {
			out = append(out, strings.ToLower(h))
		}
		return out
	}
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	for _, a := range []string{s.cfg.HTTPAddress, s.cfg.AdvertisedHTTP} {
		if h, _, err := net.SplitHostPort(a); err == nil && h != "" {
			hosts = append(hosts, strings.ToLower(h))
		}
	}
	return hosts
}

// hostName strips the port of a Host header value (and IPv6 brackets).
func hostName(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return strings.ToLower(h)
	}
	return strings.ToLower(strings.Trim(hostport, "[]"))
}

// checkHTTPOrigin checks Host and Origin; code 0 = pass.
func checkHTTPOrigin(r *http.Request, allowed []string) (code int, msg string) {
	host := hostName(r.Host)
	if net.ParseIP(host) == nil && !slices.Contains(allowed, host) {
		return http.StatusMisdirectedRequest, "host " + host + " is not one of broker.http_allowed_hosts"
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		oh := ""
		if err == nil {
			oh = hostName(u.Host)
		}
		if oh == "" || (oh != host && !slices.Contains(allowed, oh)) {
			return http.StatusForbidden, "origin " + o + " is not this broker nor one of broker.http_allowed_hosts"
		}
	}
	return 0, ""
}

// readOnlyAdminMethod reports whether an admin method only reads.
func readOnlyAdminMethod(method string) bool {
	return strings.HasPrefix(method, "Get") || strings.HasPrefix(method, "List")
}

// allowedHTTPMethods is the Allow header of a method's route.
func allowedHTTPMethods(method string) string {
	if readOnlyAdminMethod(method) {
		return "GET, POST"
	}
	return "POST"
}

// checkHTTPMethod checks the HTTP method and content type; code 0 = pass.
func checkHTTPMethod(r *http.Request, method string) (code int, msg string) {
	switch {
	case r.Method == http.MethodPost:
		ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || ct != "application/json" {
			return http.StatusUnsupportedMediaType, "Content-Type must be application/json"
		}
		return 0, ""
	case r.Method == http.MethodGet && readOnlyAdminMethod(method):
		return 0, ""
	}
	return http.StatusMethodNotAllowed, method + " takes " + allowedHTTPMethods(method)
}

// writeHTTPDenied answers 403 for a call the rules refuse.
func writeHTTPDenied(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	b, _ := json.Marshal(map[string]string{"code": "ERROR_CODE_PERMISSION_DENIED", "message": msg})
	_, _ = w.Write(b)
}
