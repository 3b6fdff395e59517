package broker_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/region/regiontest"
)

// fuzzAdminMethods are the admin methods FuzzAdminHTTP posts to: every
// reader, and the writers whose effect stays small whatever the body
// (policies, grants, tenants and namespaces are a record each). Left out:
// those that create topics or subscriptions (a ledger each), delete, or
// act on bookies and autorecovery.
var fuzzAdminMethods = []string{
	"CreateTenant", "UpdateTenant", "GetTenant", "SetTenantAllowedRegions", "ListTenants",
	"CreateNamespace", "ListNamespaces", "GetNamespacePolicies", "SetNamespacePolicies",
	"SetNamespaceReplication", "GetNamespaceReplication",
	"ListTopics", "GetTopicStats", "GetTopicInternalStats", "ListSubscriptions", "ResetSubscription", "SkipLostEntries",
	"SetTopicPolicies", "GetTopicPolicies", "RemoveTopicPolicies", "GetEffectivePolicies",
	"SetPrefixPolicies", "ListPrefixPolicies", "RemovePrefixPolicies",
	"SetTopicReplication", "GetTopicReplication", "RemoveTopicReplication",
	"GetPartitionedTopicMetadata", "UpdatePartitionedTopic", "ListPartitionedTopics",
	"GrantPermission", "RevokePermission", "GetPermissions",
	"GetMetadataStatus", "GetMetadataKey", "ListMetadataKeys", "GetLedger", "ListTopicLedgers",
	"ListRegions", "ListBrokers", "ListBookies",
}

// FuzzAdminHTTP posts arbitrary JSON bodies to a real broker's admin HTTP
// API (loopback, one broker, one bookie), the method picked by the first
// argument. Properties: the broker answers every request (a handler
// panic closes the connection); no answer is a 5xx; every refusal is a
// JSON {code, message} with an ERROR_CODE_ code and a message.
func FuzzAdminHTTP(f *testing.F) {
	rc := regiontest.Start(f, regiontest.Options{Brokers: 1, Bookies: 1})
	base := "http://" + rc.Broker(0).HTTPAddr() + "/admin/v1/"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A topic with a subscription and ledgers, for the requests to find.
	_, adm := conn(f, rc.Addrs()[0])
	topic := "public/default/fuzz"
	if _, err := adm.CreateTopic(ctx, &clientv1.CreateTopicRequest{Topic: topic}); err != nil {
		f.Fatal(err)
	}
	if _, err := adm.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: "s"}); err != nil {
		f.Fatal(err)
	}
	index := map[string]uint8{}
	for i, m := range fuzzAdminMethods {
		index[m] = uint8(i)
	}
	for _, s := range []struct{ method, body string }{
		{"CreateTenant", `{"tenant":"acme","allowedRegions":["r"]}`},
		{"UpdateTenant", `{"tenant":"public","adminRoles":["ops"]}`},
		{"CreateNamespace", `{"namespace":"public/ns2","policies":{"retentionTimeSeconds":"60","ackQuorum":2}}`},
		{"SetNamespacePolicies", `{"namespace":"public/default","policies":{"ackQuorum":5}}`},
		{"SetNamespacePolicies", `{"namespace":"public/default","policies":{"retentionTimeSeconds":"-1","maxUnackedMessagesPerConsumer":-7}}`},
		{"GetNamespacePolicies", `{"namespace":"public/default"}`},
		{"SetNamespaceReplication", `{"namespace":"public/default","regions":["a","a"]}`},
		{"GetTopicStats", `{"topic":"public/default/fuzz"}`},
		{"GetTopicInternalStats", `{"topic":"public/default/fuzz"}`},
		{"ResetSubscription", `{"topic":"public/default/fuzz","subscription":"s","messageId":{"ledgerId":"-1","entryId":"9223372036854775807"}}`},
		{"SkipLostEntries", `{"topic":"public/default/fuzz","ledgerId":"1"}`},
		{"SetTopicPolicies", `{"topic":"public/default/fuzz","policies":{"ackQuorum":1},"fields":["ack_quorum","no_such_field"]}`},
		{"SetPrefixPolicies", `{"prefix":"public/default/fu","policies":{},"fields":[]}`},
		{"GetEffectivePolicies", `{"topic":"public/default/fuzz"}`},
		{"SetTopicReplication", `{"topic":"public/default/fuzz","regions":[]}`},
		{"UpdatePartitionedTopic", `{"topic":"public/default/fuzz","partitions":2147483647}`},
		{"GrantPermission", `{"namespace":"public/default","role":"r","actions":["produce","nope"]}`},
		{"GetMetadataKey", `{"key":"/../../etc"}`},
		{"ListMetadataKeys", `{"prefix":"","limit":-1}`},
		{"GetLedger", `{"ledgerId":"18446744073709551615"}`},
		{"ListTopicLedgers", `{"topic":"public/default/fuzz"}`},
		{"ListTopics", `{"namespace":"\u0000/\ud800"}`},
		{"ListSubscriptions", `{"topic":"public/default/fuzz","unknownField":1}`},
		{"ListNamespaces", ``},
		{"GetTenant", `{"tenant":"public"`},
		{"ListRegions", `[]`},
		{"GetPermissions", `null`},
	} {
		i, ok := index[s.method]
		if !ok {
			f.Fatalf("seed method %s is not fuzzed", s.method)
		}
		f.Add(i, s.body)
	}
	cli := &http.Client{Timeout: 20 * time.Second}
	f.Fuzz(func(t *testing.T, m uint8, body string) {
		method := fuzzAdminMethods[int(m)%len(fuzzAdminMethods)]
		resp, err := cli.Post(base+method, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s %q: no answer (handler panic?): %v", method, body, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s %q: reading the answer: %v", method, body, err)
		}
		if resp.StatusCode >= 500 {
			t.Fatalf("%s %q: %d %s", method, body, resp.StatusCode, b)
		}
		if resp.StatusCode == http.StatusOK {
			return
		}
		var e struct{ Code, Message string }
		if err := json.Unmarshal(b, &e); err != nil || !strings.HasPrefix(e.Code, "ERROR_CODE_") || e.Message == "" {
			t.Fatalf("%s %q: refusal %d is not {code, message}: %s", method, body, resp.StatusCode, b)
		}
	})
}
