package security

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Rule decides whether id may call one method (a rule table's entry).
type Rule func(id Identity) bool

// Rules is a service's rule table: full method name ("/pkg.Service/Method")
// to its rule.
type Rules map[string]Rule

// IsSuperuser reports whether role is one of security.superusers.
func (rt *Runtime) IsSuperuser(role string) bool {
	return rt != nil && role != "" && slices.Contains(rt.cfg.Superusers, role)
}

// IsComponent reports whether id is a component of one of kinds
// ("<kind>.<region>").
func IsComponent(id Identity, kinds ...string) bool {
	k, _, ok := ParseComponent(id.Role)
	return ok && slices.Contains(kinds, k)
}

// RulesAuthorizer authorizes by a rule table when auth is enabled (with
// auth off everything passes, as before): a method without a rule is
// denied, so a method added later without one is refused, never open.
func (rt *Runtime) RulesAuthorizer(rules Rules) Authorizer {
	return AuthorizerFunc(func(_ context.Context, method string, id Identity) error {
		if !rt.AuthEnabled() {
			return nil
		}
		r, ok := rules[method]
		if !ok {
			return status.Errorf(codes.PermissionDenied, "%s: the method has no authorization rule", method)
		}
		if !r(id) {
			return status.Errorf(codes.PermissionDenied, "%s: role %q may not call it", method, id.Role)
		}
		return nil
	})
}

// HTTPAuthorize wraps h (inside HTTPHandler, which put the Identity in the
// request's context) so that, with auth enabled, a request allow refuses
// is answered 403 with a JSON error. With auth off h is returned
// unchanged.
func (rt *Runtime) HTTPAuthorize(h http.Handler, allow func(r *http.Request, id Identity) bool) http.Handler {
	if !rt.AuthEnabled() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := IdentityFrom(r.Context())
		if !allow(r, id) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			b, _ := json.Marshal(map[string]string{"code": "ERROR_CODE_PERMISSION_DENIED", "message": "role " + id.Role + " may not " + r.Method + " " + r.URL.Path})
			_, _ = w.Write(b)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// HTTPComponentAuthorize is HTTPAuthorize with a component node's HTTP
// rule: reads (GET, HEAD) for every authenticated identity (HTTPHandler
// already refused the anonymous), anything else only for a component of
// kinds or a superuser.
func (rt *Runtime) HTTPComponentAuthorize(h http.Handler, kinds ...string) http.Handler {
	return rt.HTTPAuthorize(h, func(r *http.Request, id Identity) bool {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			return true
		}
		return IsComponent(id, kinds...) || rt.IsSuperuser(id.Role)
	})
}
