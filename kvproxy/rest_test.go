package kvproxy_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/kvproxy"
)

// call sends one request to the REST front and decodes its JSON answer.
func (k *kvEnv) call(t *testing.T, token, method, path string, body []byte, hdr ...string) (int, any) {
	t.Helper()
	return k.callURL(t, k.restURL(t), token, method, path, body, hdr...)
}

// callURL is call against the REST front at base.
func (k *kvEnv) callURL(t *testing.T, base, token, method, path string, body []byte, hdr ...string) (int, any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: k.CA.Pool()}}}
	res, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: Content-Type %q, body %s", method, path, ct, b)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s %s: not JSON: %s", method, path, b)
	}
	return res.StatusCode, v
}

func (k *kvEnv) restURL(t *testing.T) string {
	t.Helper()
	_, port, _ := strings.Cut(k.rest.ListenAddr(), ":")
	return "https://localhost:" + port
}

func jsonOf(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRESTFrontSpeaksUpstash: the REST protocol as Upstash documents it — commands in the path (a POST
// body as the last argument, query parameters after it) and as JSON arrays, pipelines and transactions,
// base64 results on request, Upstash's status codes; every error body is JSON.
func TestRESTFrontSpeaksUpstash(t *testing.T) {
	t.Parallel()
	k := newKVEnv(t)
	kv := k.store(t, k.project(t, "rest"))
	tok := *kv.Token
	if kv.Credentials.RESTURL != k.restURL(t) || kv.Credentials.RESTToken == nil || *kv.Credentials.RESTToken != tok {
		t.Fatalf("credentials: %+v", kv.Credentials)
	}
	cases := []struct {
		method, path, body string
		hdr                []string
		status             int
		want               string
	}{
		{"GET", "/set/foo/bar", "", nil, 200, `{"result":"OK"}`},
		{"GET", "/get/foo", "", nil, 200, `{"result":"bar"}`},
		{"POST", "/set/doc", `{"a":[1,2]}`, nil, 200, `{"result":"OK"}`},
		{"GET", "/get/doc", "", nil, 200, `{"result":"{\"a\":[1,2]}"}`},
		{"POST", "/set/tmp?EX=100", "v", nil, 200, `{"result":"OK"}`},
		{"GET", "/ttl/tmp", "", nil, 200, `{"result":100}`},
		{"GET", "/set/sp%20ace/a%2Fb", "", nil, 200, `{"result":"OK"}`},
		{"POST", "/", `["GET","sp ace"]`, nil, 200, `{"result":"a/b"}`},
		{"POST", "/", `["INCRBY","n",5]`, nil, 200, `{"result":5}`},
		{"POST", "/", `["GET","nothing"]`, nil, 200, `{"result":null}`},
		{"POST", "/", `["RPUSH","l","x","y"]`, nil, 200, `{"result":2}`},
		{"POST", "/", `["LRANGE","l",0,-1]`, nil, 200, `{"result":["x","y"]}`},
		{"POST", "/", `["LRANGE","l",0,-1]`, []string{"Upstash-Encoding", "base64"}, 200,
			`{"result":["` + base64.StdEncoding.EncodeToString([]byte("x")) + `","` + base64.StdEncoding.EncodeToString([]byte("y")) + `"]}`},
		{"GET", "/get/foo", "", []string{"Upstash-Encoding", "base64"}, 200, `{"result":"YmFy"}`},
		{"POST", "/pipeline", `[["SET","p","1"],["INCR","p"],["HGET","p","f"],["GET","p"]]`, nil, 200,
			`[{"result":"OK"},{"result":2},{"error":"WRONGTYPE Operation against a key holding the wrong kind of value"},{"result":"2"}]`},
		{"POST", "/multi-exec", `[["SET","m","1"],["INCR","m"],["GET","m"]]`, nil, 200, `[{"result":"OK"},{"result":2},{"result":"2"}]`},
		{"POST", "/multi-exec", `[["SET","m"],["INCR","m"]]`, nil, 400, ``},
		{"POST", "/", `["HGET","foo","f"]`, nil, 400, `{"error":"WRONGTYPE Operation against a key holding the wrong kind of value"}`},
		{"POST", "/", `["NOSUCHCOMMAND"]`, nil, 400, ``},
		{"POST", "/", `["CONFIG","SET","maxmemory","0"]`, nil, 400, ``},
		{"POST", "/", `{"cmd":"GET"}`, nil, 400, ``},
		{"POST", "/", `["GET",{"a":1}]`, nil, 400, ``},
		{"POST", "/", `["GET",true]`, nil, 400, ``},
		{"POST", "/", `[]`, nil, 400, ``},
		{"POST", "/pipeline", `["GET","x"]`, nil, 400, ``},
		{"GET", "/pipeline", ``, nil, 405, ``},
		{"DELETE", "/get/foo", ``, nil, 405, ``},
		{"POST", "/", `["SUBSCRIBE","ch"]`, nil, 400, ``},
	}
	for _, c := range cases {
		status, got := k.call(t, tok, c.method, c.path, []byte(c.body), c.hdr...)
		if status != c.status {
			t.Fatalf("%s %s %s: status %d, want %d (%v)", c.method, c.path, c.body, status, c.status, got)
		}
		if c.want != "" && !reflect.DeepEqual(got, jsonOf(t, c.want)) {
			t.Fatalf("%s %s %s: got %v, want %s", c.method, c.path, c.body, got, c.want)
		}
		if m, ok := got.(map[string]any); c.status != 200 && (!ok || m["error"] == nil) {
			t.Fatalf("%s %s: an error without {\"error\": …}: %v", c.method, c.path, got)
		}
	}
	// CONFIG is refused by the store's ACLs, not by the front.
	if _, got := k.call(t, tok, "POST", "/", []byte(`["CONFIG","GET","*"]`)); !strings.HasPrefix(got.(map[string]any)["error"].(string), "NOPERM") {
		t.Fatalf("CONFIG over REST: %v", got)
	}
	// The token: missing, wrong, or in the query as _token.
	if status, _ := k.call(t, "", "GET", "/get/foo", nil); status != 401 {
		t.Fatalf("no token: %d", status)
	}
	if status, _ := k.call(t, "kv_wrong", "GET", "/get/foo", nil); status != 401 {
		t.Fatalf("wrong token: %d", status)
	}
	if status, got := k.call(t, "", "GET", "/get/foo?_token="+tok, nil); status != 200 || !reflect.DeepEqual(got, jsonOf(t, `{"result":"bar"}`)) {
		t.Fatalf("_token: %d %v", status, got)
	}
	// 1 MB cap.
	if status, _ := k.call(t, tok, "POST", "/set/big", bytes.Repeat([]byte("x"), kvproxy.MaxRESTBody+1)); status != 413 {
		t.Fatalf("oversize body: %d", status)
	}
	if status, _ := k.call(t, tok, "POST", "/set/big", bytes.Repeat([]byte("x"), kvproxy.MaxRESTBody-100)); status != 200 {
		t.Fatalf("a body under the cap: %d", status)
	}
	// After a rotation the old token is refused at once.
	rot, err := k.Svc.KV().RotateToken(t.Context(), k.p, kv.ProjectID)
	if err != nil {
		t.Fatal(err)
	}
	if status, _ := k.call(t, tok, "GET", "/get/foo", nil); status != 401 {
		t.Fatalf("old token after rotation: %d", status)
	}
	if status, _ := k.call(t, *rot.KVStore.Token, "GET", "/get/foo", nil); status != 200 {
		t.Fatalf("new token: %d", status)
	}
}

// TestUpstashSDK: the @upstash/redis SDK, unmodified, works with the printed rest_url and rest_token.
func TestUpstashSDK(t *testing.T) {
	t.Parallel()
	k := newKVEnv(t)
	kv := k.store(t, k.project(t, "sdk"))
	work := t.TempDir()
	for _, name := range []string{"package.json", "package-lock.json", "sdk.mjs"} {
		b, err := os.ReadFile(filepath.Join("testdata", "upstash", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	npm := exec.CommandContext(t.Context(), "npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	npm.Dir, npm.Env = work, append(os.Environ(), "NO_UPDATE_NOTIFIER=1")
	if b, err := npm.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, b)
	}
	node := exec.CommandContext(t.Context(), "node", "sdk.mjs")
	node.Dir = work
	node.Env = append(os.Environ(), "UPSTASH_REDIS_REST_URL="+kv.Credentials.RESTURL, "UPSTASH_REDIS_REST_TOKEN="+*kv.Credentials.RESTToken,
		"NODE_EXTRA_CA_CERTS="+k.CA.CertPath())
	var stderr bytes.Buffer
	node.Stderr = &stderr
	out, err := node.Output()
	if err != nil {
		t.Fatalf("node sdk.mjs: %v\n%s", err, stderr.String())
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("sdk.mjs printed %s", out)
	}
	wantJSON, err := os.ReadFile(filepath.Join("testdata", "upstash", "want.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := jsonOf(t, string(wantJSON)).(map[string]any)
	for key, w := range want {
		if !reflect.DeepEqual(got[key], w) {
			t.Errorf("%s: got %#v, want %#v", key, got[key], w)
		}
	}
	if s, _ := got["wrongType"].(string); !strings.Contains(s, "WRONGTYPE") {
		t.Errorf("wrong type: %v", got["wrongType"])
	}
	if s, _ := got["badToken"].(string); !strings.Contains(s, "Unauthorized") {
		t.Errorf("bad token: %v", got["badToken"])
	}
}

// TestRESTOversizeBodyGetsItsAnswer: a body over MaxRESTBody is answered 413 with a JSON error that the
// client reads after sending its whole body — over HTTP/1.1 (before, the connection was reset) and over
// HTTP/2.
func TestRESTOversizeBodyGetsItsAnswer(t *testing.T) {
	t.Parallel()
	k := newKVEnv(t)
	tok := *k.store(t, k.project(t, "big")).Token
	body := bytes.Repeat([]byte("x"), 10<<20)

	c, err := tls.Dial("tcp", k.rest.ListenAddr(), &tls.Config{RootCAs: k.CA.Pool(), ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	head := "POST /set/k HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + tok + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(body); err != nil {
		t.Fatalf("HTTP/1.1: sending the body: %v", err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("HTTP/1.1: the client saw no answer: %v", err)
	}
	var e struct{ Error string }
	if res.StatusCode != http.StatusRequestEntityTooLarge || json.NewDecoder(res.Body).Decode(&e) != nil || e.Error == "" {
		t.Fatalf("HTTP/1.1: %d %v", res.StatusCode, e)
	}

	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: k.CA.Pool()}, ForceAttemptHTTP2: true}, Timeout: 30 * time.Second}
	defer cl.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", k.restURL(t)+"/set/k", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err = cl.Do(req)
	if err != nil {
		t.Fatalf("HTTP/2: the client saw no answer: %v", err)
	}
	defer res.Body.Close()
	e.Error = ""
	if res.ProtoMajor != 2 || res.StatusCode != http.StatusRequestEntityTooLarge || json.NewDecoder(res.Body).Decode(&e) != nil || e.Error == "" {
		t.Fatalf("HTTP/2: %s %d %v", res.Proto, res.StatusCode, e)
	}
}
