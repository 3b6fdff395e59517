package broker_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestAdminJSONOverHTTP(t *testing.T) {
	_, _, rc := oneBroker(t, nil)
	base := "http://" + rc.Broker(0).HTTPAddr()
	post := func(method, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(base+"/admin/v1/"+method, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: not JSON: %s", method, b)
		}
		return resp.StatusCode, m
	}
	if code, m := post("CreateTenant", `{"tenant":"acme"}`); code != 200 {
		t.Fatalf("create tenant: %d %v", code, m)
	}
	if code, m := post("CreateTenant", `{"tenant":"acme"}`); code != 409 || m["code"] != "ERROR_CODE_ALREADY_EXISTS" {
		t.Fatalf("duplicate tenant: %d %v", code, m)
	}
	if code, m := post("CreateNamespace", `{"namespace":"acme/ns","policies":{"retentionTimeSeconds":"60"}}`); code != 200 {
		t.Fatalf("create namespace: %d %v", code, m)
	}
	if code, m := post("CreateNamespace", `{"namespace":"acme/bad","policies":{"ackQuorum":5}}`); code != 400 || m["code"] != "ERROR_CODE_INVALID_ARGUMENT" {
		t.Fatalf("bad policies: %d %v", code, m)
	}
	if code, m := post("ListNamespaces", `{"tenant":"acme"}`); code != 200 || len(m["namespaces"].([]any)) != 1 {
		t.Fatalf("list namespaces: %d %v", code, m)
	}
	if code, m := post("NoSuchMethod", ``); code != 404 {
		t.Fatalf("unknown method: %d %v", code, m)
	}
	if code, m := post("CreateTopic", `{not json`); code != 400 {
		t.Fatalf("bad body: %d %v", code, m)
	}
	if code, m := post("GetTopicStats", `{"topic":"acme/ns/none"}`); code != 404 {
		t.Fatalf("stats of a missing topic: %d %v", code, m)
	}
	resp, err := http.Get(base + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz: %v %v", resp, err)
	}
	resp.Body.Close()
}
