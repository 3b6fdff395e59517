package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/netguard"
	"github.com/meridianmq/meridian/security"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// maxAdminBody bounds an admin JSON request.
const maxAdminBody = 1 << 20

// longAdminMethods may run past http_write_timeout: a scrub reads every
// entry a bookie stores, at scrub_bytes_per_second. The caller is an
// authenticated admin, and only this handler's deadline is lifted.
var longAdminMethods = map[string]bool{"ScrubBookie": true}

// adminRoute serves one admin method over HTTP: it decodes body, asks
// authorize about the request (the method's rule, as over gRPC) and calls
// the method.
type adminRoute func(ctx context.Context, body []byte, authorize func(proto.Message) error) (proto.Message, error)

func route[Req proto.Message, Resp proto.Message](newReq func() Req, fn func(context.Context, Req) (Resp, error)) adminRoute {
	return func(ctx context.Context, body []byte, authorize func(proto.Message) error) (proto.Message, error) {
		req := newReq()
		if len(strings.TrimSpace(string(body))) > 0 {
			if err := protojson.Unmarshal(body, req); err != nil {
				return nil, GRPCError(fmt.Errorf("%w: request body: %v", ErrInvalidArgument, err))
			}
		}
		if err := authorize(req); err != nil {
			return nil, err
		}
		return fn(ctx, req)
	}
}

func (s *Server) adminRoutes() map[string]adminRoute {
	a := &adminService{b: s}
	routes := map[string]adminRoute{
		"ListTenants":           route(func() *clientv1.ListTenantsRequest { return &clientv1.ListTenantsRequest{} }, a.ListTenants),
		"CreateTenant":          route(func() *clientv1.CreateTenantRequest { return &clientv1.CreateTenantRequest{} }, a.CreateTenant),
		"DeleteTenant":          route(func() *clientv1.DeleteTenantRequest { return &clientv1.DeleteTenantRequest{} }, a.DeleteTenant),
		"ListNamespaces":        route(func() *clientv1.ListNamespacesRequest { return &clientv1.ListNamespacesRequest{} }, a.ListNamespaces),
		"CreateNamespace":       route(func() *clientv1.CreateNamespaceRequest { return &clientv1.CreateNamespaceRequest{} }, a.CreateNamespace),
		"DeleteNamespace":       route(func() *clientv1.DeleteNamespaceRequest { return &clientv1.DeleteNamespaceRequest{} }, a.DeleteNamespace),
		"GetNamespacePolicies":  route(func() *clientv1.GetNamespacePoliciesRequest { return &clientv1.GetNamespacePoliciesRequest{} }, a.GetNamespacePolicies),
		"SetNamespacePolicies":  route(func() *clientv1.SetNamespacePoliciesRequest { return &clientv1.SetNamespacePoliciesRequest{} }, a.SetNamespacePolicies),
		"ListTopics":            route(func() *clientv1.ListTopicsRequest { return &clientv1.ListTopicsRequest{} }, a.ListTopics),
		"CreateTopic":           route(func() *clientv1.CreateTopicRequest { return &clientv1.CreateTopicRequest{} }, a.CreateTopic),
		"DeleteTopic":           route(func() *clientv1.DeleteTopicRequest { return &clientv1.DeleteTopicRequest{} }, a.DeleteTopic),
		"GetTopicStats":         route(func() *clientv1.GetTopicStatsRequest { return &clientv1.GetTopicStatsRequest{} }, a.GetTopicStats),
		"GetTopicInternalStats": route(func() *clientv1.GetTopicInternalStatsRequest { return &clientv1.GetTopicInternalStatsRequest{} }, a.GetTopicInternalStats),
		"UnloadTopic":           route(func() *clientv1.UnloadTopicRequest { return &clientv1.UnloadTopicRequest{} }, a.UnloadTopic),
		"ListSubscriptions":     route(func() *clientv1.ListSubscriptionsRequest { return &clientv1.ListSubscriptionsRequest{} }, a.ListSubscriptions),
		"CreateSubscription":    route(func() *clientv1.CreateSubscriptionRequest { return &clientv1.CreateSubscriptionRequest{} }, a.CreateSubscription),
		"DeleteSubscription":    route(func() *clientv1.DeleteSubscriptionRequest { return &clientv1.DeleteSubscriptionRequest{} }, a.DeleteSubscription),
		"ResetSubscription":     route(func() *clientv1.ResetSubscriptionRequest { return &clientv1.ResetSubscriptionRequest{} }, a.ResetSubscription),
		"ListBrokers":           route(func() *clientv1.ListBrokersRequest { return &clientv1.ListBrokersRequest{} }, a.ListBrokers),
		"ListBookies":           route(func() *clientv1.ListBookiesRequest { return &clientv1.ListBookiesRequest{} }, a.ListBookies),
		"GetAutorecoveryStatus": route(func() *clientv1.GetAutorecoveryStatusRequest { return &clientv1.GetAutorecoveryStatusRequest{} }, a.GetAutorecoveryStatus),
		"PauseAutorecovery":     route(func() *clientv1.PauseAutorecoveryRequest { return &clientv1.PauseAutorecoveryRequest{} }, a.PauseAutorecovery),
		"ResumeAutorecovery":    route(func() *clientv1.ResumeAutorecoveryRequest { return &clientv1.ResumeAutorecoveryRequest{} }, a.ResumeAutorecovery),
		"DecommissionBookie":    route(func() *clientv1.DecommissionBookieRequest { return &clientv1.DecommissionBookieRequest{} }, a.DecommissionBookie),
		"RecommissionBookie":    route(func() *clientv1.RecommissionBookieRequest { return &clientv1.RecommissionBookieRequest{} }, a.RecommissionBookie),
		"ScrubBookie":           route(func() *clientv1.ScrubBookieRequest { return &clientv1.ScrubBookieRequest{} }, a.ScrubBookie),
		"SkipLostEntries":       route(func() *clientv1.SkipLostEntriesRequest { return &clientv1.SkipLostEntriesRequest{} }, a.SkipLostEntries),
	}
	addMetadataAdminRoutes(routes, a)
	addReplicationAdminRoutes(routes, a)
	addPolicyAdminRoutes(routes, a)
	addPartitionedAdminRoutes(routes, a)
	addPermissionAdminRoutes(routes, a)
	return routes
}

func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	var g prometheus.Gatherer = prometheus.DefaultGatherer
	if s.cfg.Gatherer != nil {
		g = s.cfg.Gatherer
	} else if r, ok := s.cfg.Registerer.(prometheus.Gatherer); ok {
		g = r
	}
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK); io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "not ready\n")
			return
		}
		io.WriteString(w, "ready\n")
	})
	routes := s.adminRoutes()
	hosts := s.httpAllowedHosts()
	mux.HandleFunc("/admin/v1/", func(w http.ResponseWriter, r *http.Request) {
		method := strings.TrimPrefix(r.URL.Path, "/admin/v1/")
		if code, msg := checkHTTPOrigin(r, hosts); code != 0 {
			writeAdminError(w, code, clientv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, msg)
			return
		}
		h, ok := routes[method]
		if !ok {
			writeAdminError(w, http.StatusNotFound, clientv1.ErrorCode_ERROR_CODE_NOT_FOUND, "unknown admin method "+method)
			return
		}
		if code, msg := checkHTTPMethod(r, method); code != 0 {
			if code == http.StatusMethodNotAllowed {
				w.Header().Set("Allow", allowedHTTPMethods(method))
			}
			writeAdminError(w, code, clientv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, msg)
			return
		}
		body, err := netguard.ReadBody(w, r, maxAdminBody)
		if err != nil {
			code := http.StatusBadRequest
			if errors.Is(err, netguard.ErrBodyTooLarge) {
				code = http.StatusRequestEntityTooLarge
			}
			writeAdminError(w, code, clientv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "admin "+method+": "+err.Error())
			return
		}
		if longAdminMethods[method] {
			netguard.LiftWriteTimeout(w)
		}
		full := "/" + clientv1.Admin_ServiceDesc.ServiceName + "/" + method
		resp, err := h(r.Context(), body, func(req proto.Message) error {
			return s.authorizeRequest(r.Context(), full, security.IdentityFrom(r.Context()), req)
		})
		if status.Code(err) == codes.PermissionDenied {
			writeHTTPDenied(w, status.Convert(err).Message())
			return
		}
		if err != nil {
			e := &clientv1.Error{Code: clientv1.ErrorCode_ERROR_CODE_INTERNAL, Message: err.Error()}
			code := codes.Internal
			if st, ok := status.FromError(err); ok {
				code = st.Code()
				e.Message = st.Message()
				for _, d := range st.Details() {
					if ce, ok := d.(*clientv1.Error); ok {
						e = ce
					}
				}
			}
			writeAdminError(w, httpStatus(code), e.Code, e.Message)
			return
		}
		b, _ := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(resp)
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	})
	return mux
}

// httpStatus maps an admin call's gRPC code to its HTTP status.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.FailedPrecondition:
		return http.StatusConflict
	case codes.Unavailable, codes.DeadlineExceeded:
		return http.StatusServiceUnavailable
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests // a limit: the body names it
	case codes.Unimplemented:
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}

func writeAdminError(w http.ResponseWriter, httpCode int, code clientv1.ErrorCode, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	b, _ := json.Marshal(map[string]string{"code": code.String(), "message": msg})
	w.Write(b)
}
