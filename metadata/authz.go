package metadata

import (
	"net/http"

	metadatav1 "github.com/meridianmq/meridian/api/metadata/v1"
	"github.com/meridianmq/meridian/security"
)

// Authorization of a metadata node (issue 21), enforced when
// security.auth is enabled: the Metadata service serves only components
// (brokers, bookies, autorecovery, metadata nodes: "<kind>.<region>");
// superusers may also call the read-only Get, List, Watch and Status. A
// method without a rule (gRPC reflection included) is denied. Over HTTP,
// /healthz and /readyz are open, GET routes (/metrics, /status, GET
// /debug/clock) need any authenticated identity, and POST routes (POST
// /debug/clock) a component or a superuser.

// componentKinds are the components a metadata node serves.
var componentKinds = []string{security.KindBroker, security.KindBookie, security.KindAutorecovery, security.KindMetadata}

// Rules returns the Metadata service's rule table for rt (superusers from
// rt's security.superusers). Every method is listed: one missing is
// denied to everyone.
func Rules(rt *security.Runtime) security.Rules {
	components := func(id security.Identity) bool { return security.IsComponent(id, componentKinds...) }
	reads := func(id security.Identity) bool { return components(id) || rt.IsSuperuser(id.Role) }
	return security.Rules{
		metadatav1.Metadata_Get_FullMethodName:           reads,
		metadatav1.Metadata_List_FullMethodName:          reads,
		metadatav1.Metadata_Watch_FullMethodName:         reads,
		metadatav1.Metadata_Status_FullMethodName:        reads,
		metadatav1.Metadata_Put_FullMethodName:           components,
		metadatav1.Metadata_Delete_FullMethodName:        components,
		metadatav1.Metadata_Txn_FullMethodName:           components,
		metadatav1.Metadata_CreateSession_FullMethodName: components,
		metadatav1.Metadata_KeepAlive_FullMethodName:     components,
		metadatav1.Metadata_CloseSession_FullMethodName:  components,
	}
}

// Authorizer returns the metadata node's gRPC authorizer (see Rules).
func Authorizer(rt *security.Runtime) security.Authorizer { return rt.RulesAuthorizer(Rules(rt)) }

// httpAuthorize applies the HTTP rules to h.
func httpAuthorize(rt *security.Runtime, h http.Handler) http.Handler {
	return rt.HTTPComponentAuthorize(h, componentKinds...)
}
