package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIAdminSchemas: upload (JSON Schema file, Pulsar schema file), get,
// versions, compatibility test, set/get compatibility, delete, each with
// --output json; bad values are one-line errors naming the flag and
// change nothing.
func TestCLIAdminSchemas(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a region (-short)")
	}
	url := cliStandalone(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v1 := write("v1.json", `{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`)
	v2 := write("v2.json", `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name"]}`)
	bad := write("bad.json", `{"type":"object","properties":{"name":{"type":"string"},"phone":{"type":"string"}},"required":["name","phone"]}`)
	pulsar := write("pulsar.json", `{"type":"JSON","schema":"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},\"x\":{\"type\":\"string\"}},\"required\":[\"name\"]}","properties":{"owner":"team-a"}}`)
	const topic = "public/default/cli-schema"
	run := func(args ...string) cliResult {
		t.Helper()
		return runCLI(t, "", append([]string{"admin", "--url", url, "schemas"}, args...)...)
	}
	ok := func(args ...string) cliResult {
		t.Helper()
		r := run(args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		return r
	}
	refused := func(part string, args ...string) {
		t.Helper()
		r := run(args...)
		if r.code == 0 || !strings.Contains(r.stderr, part) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Fatalf("%v: exit %d, stderr %q; want a one-line refusal naming %s", args, r.code, r.stderr, part)
		}
	}

	r := ok("upload", topic, "--type", "json", "-f", v1, "--output", "json")
	if l := jsonLines(t, r.stdout); len(l) != 1 || l[0]["version"] != float64(1) || l[0]["existing"] != false {
		t.Fatalf("upload json: %q", r.stdout)
	}
	r = ok("upload", topic, "--type", "json", "-f", v2)
	if !strings.Contains(r.stdout, "version 2") {
		t.Fatalf("upload v2: %q", r.stdout)
	}
	ok("upload", topic, "-f", pulsar) // Pulsar's schema file format
	avroFile := write("user.avsc", `{"type":"record","name":"User","fields":[{"name":"name","type":"string"}]}`)
	r = ok("upload", topic+"-avro", "--type", "avro", "-f", avroFile, "--output", "json")
	if l := jsonLines(t, r.stdout); l[0]["version"] != float64(1) {
		t.Fatalf("upload avro: %q", r.stdout)
	}
	r = run("compatibility", topic, "--type", "json", "-f", bad, "--output", "json")
	if l := jsonLines(t, r.stdout); r.code != 1 || len(l) != 1 || l[0]["compatible"] != false || !strings.Contains(l[0]["reason"].(string), "phone") {
		t.Fatalf("compatibility json: exit %d, %q; want the verdict and exit 1", r.code, r.stdout)
	}
	if r := ok("compatibility", topic, "--type", "json", "-f", v2); !strings.Contains(r.stdout, "compatible with") {
		t.Fatalf("compatibility of a compatible schema: %q", r.stdout)
	}
	refused("phone", "upload", topic, "--type", "json", "-f", bad)
	refused("--type", "upload", topic, "--type", "yaml", "-f", v1)
	refused("--file", "upload", topic, "--type", "json")
	refused("--property", "upload", topic, "--type", "json", "-f", v1, "--property", "novalue")
	refused("schema.definition", "upload", topic, "--type", "json", "-f", write("broken.json", "{"))
	refused("--version", "get", topic, "--version", "-1")
	refused("MODE", "set-compatibility", topic, "sideways")

	r = ok("versions", topic, "--output", "json")
	l := jsonLines(t, r.stdout)
	vs, _ := l[0]["versions"].([]any)
	if len(l) != 1 || len(vs) != 3 {
		t.Fatalf("versions after refusals: %q", r.stdout)
	}
	r = ok("get", topic, "--output", "json")
	if l := jsonLines(t, r.stdout); l[0]["version"] != float64(3) || l[0]["type"] != "SCHEMA_TYPE_JSON" || !strings.Contains(r.stdout, "team-a") {
		t.Fatalf("get latest: %q", r.stdout)
	}
	r = ok("get", topic, "--version", "1")
	if !strings.Contains(r.stdout, "version 1 type JSON") {
		t.Fatalf("get version 1: %q", r.stdout)
	}

	ok("set-compatibility", "public/default", "forward")
	ok("set-compatibility", topic, "FULL")
	r = ok("get-compatibility", topic, "--output", "json")
	if l := jsonLines(t, r.stdout); l[0]["compatibility"] != "FULL" || l[0]["source"] != "topic" {
		t.Fatalf("get-compatibility topic: %q", r.stdout)
	}
	ok("set-compatibility", topic, "inherit")
	r = ok("get-compatibility", topic)
	if strings.TrimSpace(r.stdout) != "FORWARD (from namespace)" {
		t.Fatalf("get-compatibility after inherit: %q", r.stdout)
	}

	r = ok("delete", topic, "--output", "json")
	if l := jsonLines(t, r.stdout); l[0]["version"] != float64(4) {
		t.Fatalf("delete: %q", r.stdout)
	}
	refused("deleted", "get", topic)
	ok("delete", topic, "--force")
	r = ok("versions", topic)
	if strings.TrimSpace(r.stdout) != "" {
		t.Fatalf("versions after force delete: %q", r.stdout)
	}
}
