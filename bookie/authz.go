package bookie

import (
	"net/http"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/security"
)

// Authorization of the bookie (issue 21), enforced when security.auth is
// enabled: the Bookie service serves only brokers, autorecovery and other
// bookies (component identities "<kind>.<region>"); superusers may also
// call the read-only GetInfo and Scrub (an operator's view). A method
// without a rule is denied. Over HTTP, /healthz and /readyz are open,
// /metrics (and every GET) needs any authenticated identity, and every
// other method (POST /debug/faults) a component or a superuser.

// storageKinds are the components that use a bookie's storage.
var storageKinds = []string{security.KindBroker, security.KindAutorecovery, security.KindBookie}

// Rules returns the Bookie service's rule table for rt (superusers from
// rt's security.superusers). Every method is listed: one missing is
// denied to everyone.
func Rules(rt *security.Runtime) security.Rules {
	components := func(id security.Identity) bool { return security.IsComponent(id, storageKinds...) }
	componentsOrSuperusers := func(id security.Identity) bool { return components(id) || rt.IsSuperuser(id.Role) }
	return security.Rules{
		bookiev1.Bookie_AddEntry_FullMethodName:             components,
		bookiev1.Bookie_AddEntries_FullMethodName:           components,
		bookiev1.Bookie_ReadEntry_FullMethodName:            components,
		bookiev1.Bookie_ReadRange_FullMethodName:            components,
		bookiev1.Bookie_ReadLastAddConfirmed_FullMethodName: components,
		bookiev1.Bookie_Fence_FullMethodName:                components,
		bookiev1.Bookie_DeleteLedger_FullMethodName:         components,
		bookiev1.Bookie_GetInfo_FullMethodName:              componentsOrSuperusers,
		bookiev1.Bookie_Scrub_FullMethodName:                componentsOrSuperusers,
	}
}

// Authorizer returns the bookie's gRPC authorizer (see Rules).
func Authorizer(rt *security.Runtime) security.Authorizer { return rt.RulesAuthorizer(Rules(rt)) }

// httpAuthorize applies the HTTP rules to h.
func httpAuthorize(rt *security.Runtime, h http.Handler) http.Handler {
	return rt.HTTPComponentAuthorize(h, storageKinds...)
}
