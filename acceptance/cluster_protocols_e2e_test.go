package acceptance

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// protocolClients are clients of p's API that speak HTTP/2 and HTTP/1.1 over TLS (its CA as the root).
func protocolClients(t *testing.T, p *e2eProc) map[string]*http.Client {
	t.Helper()
	tr, ok := p.client.Transport.(*http.Transport)
	if !ok || tr.TLSClientConfig == nil || tr.TLSClientConfig.RootCAs == nil {
		t.Fatal("the test client has no CA pool")
	}
	pool := tr.TLSClientConfig.RootCAs
	h2 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	h1 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}},
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}} // non-nil and empty: no HTTP/2
	t.Cleanup(h2.CloseIdleConnections)
	t.Cleanup(h1.CloseIdleConnections)
	return map[string]*http.Client{"HTTP/2.0": {Transport: h2}, "HTTP/1.1": {Transport: h1}}
}

// checkForwardedProtocols: through node fwd (which forwards to the project's node), over HTTP/2 and over
// HTTP/1.1: the project's log stream (text/event-stream, follow) brings an entry made after it started
// while it is still open (it is not held back until the stream ends: it never ends); a SQL request with
// a query of nearly the studio's 256 KiB passes whole (the server counts the literal it carries); a body
// over the API's 1 MiB limit gets the owning node's JSON 413; an import upload's signed URL, PUT to the
// forwarding node, stores the dump whole on the project's node (ownerDir), not on the forwarding one; an
// export's signed download URL, GET from the forwarding node, sends the project's node's dump.
func checkForwardedProtocols(t *testing.T, fwd, other *e2eProc, key, prj, ownerDir string) {
	t.Helper()
	// An export of the project (pg_dump on its node), and its signed download URL.
	var ex struct {
		ExportID string  `json:"export_id"`
		Job      *e2eJob `json:"job"`
	}
	other.do(t, key, http.MethodPost, "/v1/projects/"+prj+"/exports", nil, http.StatusAccepted, &ex)
	if j := other.waitJob(t, key, ex.Job.ID); j.State != "completed" {
		t.Fatalf("export: %s %q", j.State, j.Error)
	}
	var dl struct {
		Download struct {
			DownloadURL string `json:"download_url"`
		} `json:"download"`
	}
	other.do(t, key, http.MethodGet, "/v1/projects/"+prj+"/exports/"+ex.ExportID+"/download", nil, http.StatusOK, &dl)
	dumps, _ := filepath.Glob(filepath.Join(ownerDir, "backups", prj, "exports", "*.dump"))
	if len(dumps) != 1 {
		t.Fatalf("the export's dump on the project's node: %v", dumps)
	}
	wantDump, err := os.ReadFile(dumps[0])
	if err != nil || len(wantDump) == 0 {
		t.Fatalf("the export's dump: %v (%d bytes)", err, len(wantDump))
	}
	du, err := url.Parse(dl.Download.DownloadURL)
	if err != nil {
		t.Fatal(err)
	}
	for proto, c := range protocolClients(t, fwd) {
		marker := "fwd_stream_" + strings.NewReplacer("/", "", ".", "").Replace(proto)
		ctx, cancel := context.WithCancel(t.Context())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fwd.api+"/v1/projects/"+prj+"/logs/stream?q="+marker, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := c.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("%s: the log stream: %v", proto, err)
		}
		if resp.Proto != proto || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			cancel()
			t.Fatalf("%s: the log stream answered %s %d %s", proto, resp.Proto, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		lines := make(chan string, 64)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		// The stream's opening comment comes through before any entry exists.
		select {
		case l := <-lines:
			if !strings.HasPrefix(l, ": stream of") {
				cancel()
				t.Fatalf("%s: the stream's first line: %q", proto, l)
			}
		case <-time.After(time.Minute): // a deadline, not a timing assertion
			cancel()
			t.Fatalf("%s: the stream's opening comment did not come through the forwarding node", proto)
		}
		// An entry made now (a failed statement through the third node) arrives on the open stream.
		other.do(t, key, http.MethodPost, "/v1/projects/"+prj+"/sql", map[string]any{"query": "select 1/0 as " + marker}, http.StatusBadRequest, nil)
		got := false
		deadline := time.After(2 * time.Minute)
		for !got {
			select {
			case l, ok := <-lines:
				if !ok {
					cancel()
					t.Fatalf("%s: the stream ended before the new entry came", proto)
				}
				got = strings.HasPrefix(l, "data: ") && strings.Contains(l, marker)
			case <-deadline:
				cancel()
				t.Fatalf("%s: the entry made after the stream started did not come through while it was open (held back by the forwarding node?)", proto)
			}
		}
		cancel()
		resp.Body.Close()
		for range lines {
		}

		// A query of nearly the studio's limit (256 KiB) passes whole; a body over the API's 1 MiB is the
		// owning node's JSON 413.
		const n = 1<<18 - 64
		status, body, gotProto := sendSQL(t, c, fwd, key, prj, "select length('"+strings.Repeat("x", n)+"') as n")
		var a struct {
			Result struct {
				Rows []map[string]any `json:"rows"`
			} `json:"result"`
		}
		if err := json.Unmarshal(body, &a); gotProto != proto || status != http.StatusOK || err != nil || len(a.Result.Rows) != 1 || fmt.Sprint(a.Result.Rows[0]["n"]) != fmt.Sprint(n) {
			t.Fatalf("%s: a SQL body of %d bytes through the forwarding node: %s %d %.300s", proto, n+30, gotProto, status, body)
		}
		status, body, _ = sendSQL(t, c, fwd, key, prj, "select length('"+strings.Repeat("x", 2<<20)+"') as n")
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(body, &e); status != http.StatusRequestEntityTooLarge || err != nil || !strings.Contains(e.Error, "exceeds") {
			t.Fatalf("%s: a SQL body over the limit through the forwarding node: %d %.300s, want the JSON 413", proto, status, body)
		}

		// An import upload's signed URL PUT to the forwarding node: the dump, whole, is the owning node's.
		var up struct {
			Upload struct {
				ID        string `json:"id"`
				UploadURL string `json:"upload_url"`
			} `json:"upload"`
		}
		other.do(t, key, http.MethodPost, "/v1/projects/"+prj+"/imports/uploads", nil, http.StatusCreated, &up)
		u, err := url.Parse(up.Upload.UploadURL)
		if err != nil {
			t.Fatal(err)
		}
		dump := bytes.Repeat([]byte("not a dump, but whole "), 24<<10) // 528 KiB
		req, _ = http.NewRequest(http.MethodPut, fwd.api+u.RequestURI(), bytes.NewReader(dump))
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err = c.Do(req)
		if err != nil {
			t.Fatalf("%s: PUT the upload through the forwarding node: %v", proto, err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		var stored struct {
			Upload struct {
				State     string `json:"state"`
				SizeBytes int    `json:"size_bytes"`
			} `json:"upload"`
		}
		if err := json.Unmarshal(body, &stored); resp.Proto != proto || resp.StatusCode != http.StatusOK || err != nil || stored.Upload.State != "uploaded" || stored.Upload.SizeBytes != len(dump) {
			t.Fatalf("%s: PUT the upload (%d bytes) through the forwarding node: %s %d %.300s", proto, len(dump), resp.Proto, resp.StatusCode, body)
		}
		name := filepath.Join("backups", prj, "imports", up.Upload.ID+".dump")
		// (the export's download, through the forwarding node: the owning node's file)
		resp, err = c.Get(fwd.api + du.RequestURI())
		if err != nil {
			t.Fatalf("%s: GET the export's download through the forwarding node: %v", proto, err)
		}
		gotDump, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Proto != proto || resp.StatusCode != http.StatusOK || !bytes.Equal(gotDump, wantDump) {
			t.Fatalf("%s: the export's download through the forwarding node: %s %d, %d bytes (want the %d of the dump on the project's node)", proto, resp.Proto, resp.StatusCode, len(gotDump), len(wantDump))
		}
		if b, err := os.ReadFile(filepath.Join(ownerDir, name)); err != nil || !bytes.Equal(b, dump) {
			t.Fatalf("%s: the upload on the project's node: %v, %d bytes (want the %d sent)", proto, err, len(b), len(dump))
		}
		if _, err := os.Stat(filepath.Join(fwd.dataDir, name)); err == nil {
			t.Fatalf("%s: the forwarding node kept the upload too", proto)
		}
	}
}

// sendSQL posts a studio query through p with client c and returns the status, body and protocol.
func sendSQL(t *testing.T, c *http.Client, p *e2eProc, key, prj, query string) (int, []byte, string) {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"query": query})
	req, _ := http.NewRequest(http.MethodPost, p.api+"/v1/projects/"+prj+"/sql", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST .../sql (%d bytes): %v", len(b), err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body, resp.Proto
}
