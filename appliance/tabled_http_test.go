package appliance_test

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/httpapi"
)

// TestTableCSVOverHTTP: the table editor's CSV import (an upload) and export (a stream) over TLS, as a
// browser and curl send them: HTTP/2 and HTTP/1.1. An import past the size limit is refused with 413 on
// both, and imports nothing.
func TestTableCSVOverHTTP(t *testing.T) {
	t.Parallel()
	e, p := keyEnv(t, appliancetest.Options{Instances: true})
	prj := provision(t, e, p, "csv over http", "development")
	c, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), c.Connections.DirectURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	if _, err := conn.Exec(t.Context(), "CREATE TABLE notes_h1 (id int PRIMARY KEY, body text); CREATE TABLE notes_h2 (LIKE notes_h1 INCLUDING ALL)"); err != nil {
		t.Fatal(err)
	}
	h := httpapi.New(e.Svc, httpapi.Options{Log: slog.New(slog.DiscardHandler), Lane: e.Lane,
		Limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	t.Cleanup(h.Close)
	base := serveTLS(t, e, h)
	do := func(t *testing.T, h2 bool, method, path string, body io.Reader) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, base+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+e.Bootstrap.APIKey)
		if body != nil {
			req.Header.Set("Content-Type", "text/csv")
		}
		resp, err := tlsClient(t, e, h2).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		checkProto(t, resp, h2)
		return resp, string(b)
	}
	for _, h2 := range []bool{true, false} {
		table := map[bool]string{true: "notes_h2", false: "notes_h1"}[h2]
		t.Run(map[bool]string{true: "HTTP/2", false: "HTTP/1.1"}[h2], func(t *testing.T) {
			path := "/v1/projects/" + prj.ID + "/tables/public/" + table + "/csv"
			// Past the limit: 413, and nothing imported (the rows before the limit included).
			big := "id,body\n" + strings.Repeat("1,"+strings.Repeat("x", 1000)+"\n", api.MaxCSVImportBytes/1000+10)
			if resp, b := do(t, h2, http.MethodPost, path, strings.NewReader(big)); resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(b, `"error"`) {
				t.Fatalf("oversized import: %d %s", resp.StatusCode, b)
			}
			in := "id,body\r\n1,\"with, comma\"\r\n2,\r\n3,\"\"\r\n"
			if resp, b := do(t, h2, http.MethodPost, path, strings.NewReader(in)); resp.StatusCode != http.StatusOK || !strings.Contains(b, `"rows_imported":3`) {
				t.Fatalf("import: %d %s", resp.StatusCode, b)
			}
			resp, b := do(t, h2, http.MethodGet, path+"?sort=-id", nil)
			want := "\"id\",\"body\"\r\n\"3\",\"\"\r\n\"2\",\r\n\"1\",\"with, comma\"\r\n"
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/csv") ||
				!strings.Contains(resp.Header.Get("Content-Disposition"), table+".csv") || b != want {
				t.Fatalf("export: %d %v\n%q\nwant %q", resp.StatusCode, resp.Header, b, want)
			}
		})
	}
}
