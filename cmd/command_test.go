package cmd

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

// TestAPICmd drives the generic command builder against a fake API: the table, --json, --wait on the
// returned job, and the answers it must refuse (no job, malformed JSON, a missing part) with an
// "unexpected response" error instead of a panic.
func TestAPICmd(t *testing.T) {
	var answer atomic.Pointer[string]
	answer.Store(ptr(`{"things":[{"id":"t_1","name":"one"},{"id":"t_22","name":"two"}]}`))
	fakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/things/x" && r.Method == http.MethodGet:
			w.Write([]byte(*answer.Load()))
		case r.URL.Path == "/v1/things/x" && r.Method == http.MethodPost:
			var body struct{ Name string }
			json.NewDecoder(r.Body).Decode(&body)
			switch body.Name {
			case "nojob":
				w.Write([]byte(`{"thing":{"id":"t_1"}}`))
			case "nothing":
				w.Write([]byte(`{"job":{"id":"job_1","type":"thing.make","state":"pending"}}`))
			default:
				w.Write([]byte(`{"thing":{"id":"t_1"},"job":{"id":"job_1","type":"thing.make","state":"pending"}}`))
			}
		case r.URL.Path == "/v1/me":
			w.Write([]byte(`{"principal":{"organization_id":"org_me"}}`))
		case r.URL.Path == "/v1/organizations/org_me/things/t_1" && r.Method == http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case r.URL.Path == "/v1/jobs/job_1":
			w.Write([]byte(`{"job":{"id":"job_1","type":"thing.make","state":"completed"}}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":"no such thing"}`))
		}
	})
	type thing struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	}
	type list struct {
		Things []*thing `json:"things"`
	}
	type made struct {
		Thing *thing   `json:"thing"`
		Job   *api.Job `json:"job"`
	}
	newTree := func() *cobra.Command {
		o := &clientOpts{}
		r := &cobra.Command{Use: "appliance", SilenceUsage: true, SilenceErrors: true}
		r.AddCommand(newAPICmd(o, apiCmd[list]{
			Use: "list ID", Args: cobra.ExactArgs(1), JSON: true,
			Path:    func(x *call) string { return "/v1/things/" + seg(x.args[0]) },
			Columns: []string{"ID", "NAME"},
			Rows: func(l *list) [][]string {
				return rowsOf(l.Things, func(t *thing) []string { return []string{t.ID, t.Name} })
			},
		}))
		var name string
		r.AddCommand(newAPICmd(o, apiCmd[made]{
			Use: "make ID", Args: cobra.ExactArgs(1), Method: http.MethodPost,
			Flags:   func(f *pflag.FlagSet) { f.StringVar(&name, "name", "", "") },
			Path:    func(x *call) string { return "/v1/things/" + seg(x.args[0]) },
			Body:    func(*call) any { return map[string]string{"name": name} },
			Need:    func(m *made) string { return missing(m.Thing == nil, "thing") },
			Job:     func(m *made) *api.Job { return m.Job },
			Started: func(_ *call, m *made) string { return "Making " + m.Thing.ID },
			Wait:    "wait",
			Print: func(x *call, m *made) error {
				x.printf("Made %s.\n", m.Thing.ID)
				return nil
			},
		}))
		r.AddCommand(newAPICmd(o, apiCmd[struct{}]{
			Use: "drop ID", Args: cobra.ExactArgs(1), Method: http.MethodDelete, Org: true, NoAnswer: true,
			Confirm: "confirm", Unconfirmed: "drop has no undo",
			Path:   func(x *call) string { return "/v1/organizations/" + seg(x.org) + "/things/" + seg(x.args[0]) },
			Failed: func(_ *call, err error) error { return fmt.Errorf("%w (is the ID right?)", err) },
			Print: func(x *call, _ *struct{}) error {
				x.printf("Dropped %s of %s.\n", x.args[0], x.org)
				return nil
			},
		}))
		return r
	}
	run := func(args ...string) (string, string, error) { return runTree(t, newTree(), args...) }

	if out, _, err := run("list", "x"); err != nil || out != "ID    NAME\nt_1   one\nt_22  two\n" {
		t.Errorf("table: %v\n%q", err, out)
	}
	if out, _, err := run("list", "x", "--json"); err != nil || !strings.Contains(out, "\"id\": \"t_22\"") {
		t.Errorf("--json: %v\n%s", err, out)
	}
	if _, _, err := run("list", "y"); err == nil || err.Error() != "GET /v1/things/y: 404 Not Found: no such thing" {
		t.Errorf("API error: %v", err)
	}
	answer.Store(ptr(`{"things": [`))
	if _, _, err := run("list", "x"); err == nil || !strings.HasPrefix(err.Error(), "GET /v1/things/x: unexpected response: ") {
		t.Errorf("malformed JSON: %v", err)
	}

	out, errw, err := run("make", "x")
	if err != nil || out != "Making t_1: job job_1 (thing.make).\n" || !strings.Contains(errw, "pass --wait") {
		t.Errorf("make without --wait: %v\n%s%s", err, out, errw)
	}
	if out, _, err := run("make", "x", "--wait"); err != nil || out != "Making t_1: job job_1 (thing.make).\nJob job_1 (thing.make) completed.\nMade t_1.\n" {
		t.Errorf("make --wait: %v\n%s", err, out)
	}
	if _, _, err := run("make", "x", "--name", "nojob"); err == nil || err.Error() != "POST /v1/things/x: unexpected response: no job" {
		t.Errorf("answer without a job: %v", err)
	}
	// --org defaults to the credential's organization; an empty answer is not read with NoAnswer; Validate
	// refuses before any request; Failed rewrites the API's error.
	if out, _, err := run("drop", "t_1"); err == nil || err.Error() != "drop has no undo; pass --confirm" || out != "" {
		t.Errorf("drop without --confirm: %v\n%s", err, out)
	}
	if out, _, err := run("drop", "t_1", "--confirm"); err != nil || out != "Dropped t_1 of org_me.\n" {
		t.Errorf("drop: %v\n%s", err, out)
	}
	if _, _, err := run("drop", "t_2", "--confirm", "--org", "org_x"); err == nil ||
		err.Error() != "DELETE /v1/organizations/org_x/things/t_2: 404 Not Found: no such thing (is the ID right?)" {
		t.Errorf("drop of an unknown thing: %v", err)
	}
	if _, _, err := run("make", "x", "--name", "nothing", "--wait"); err == nil || err.Error() != "POST /v1/things/x: unexpected response: no thing" {
		t.Errorf("answer without its thing: %v", err)
	}
}

// The commands built with it inherit the checks: `previews create` answered without its preview (or job)
// is an error, where it used to dereference a nil preview.
func TestCLIPreviewsCreateMalformedAnswer(t *testing.T) {
	var body atomic.Pointer[string]
	body.Store(ptr(`{"job":{"id":"job_1","type":"preview.create","state":"pending"}}`))
	fakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte(*body.Load()))
	})
	e := &cliEnv{t: t}
	if _, _, err := e.run("", "previews", "create", "prj_x"); err == nil ||
		err.Error() != "POST /v1/projects/prj_x/preview-databases: unexpected response: no preview" {
		t.Errorf("answer without a preview: %v", err)
	}
	body.Store(ptr(`{"preview":{"id":"pdb_1"}}`))
	if _, _, err := e.run("", "previews", "create", "prj_x"); err == nil ||
		err.Error() != "POST /v1/projects/prj_x/preview-databases: unexpected response: no job" {
		t.Errorf("answer without a job: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestAPICmdModes drives the builder's other modes against a fake API: a stream followed to its end (and
// the request in its place when Stream declines), several calls in one command (Fetch), an exit status
// from the answer with and without --json (Exit), a --json the command prints itself (OwnJSON), and
// --confirm.
func TestAPICmdModes(t *testing.T) {
	_, requests := fakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/feed/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, ": heartbeat\n\nid: 1\nevent: made\ndata: {\"n\":1}\n\nid: 2\nevent: made\ndata: {\"n\":2}\n\n")
		case "/v1/feed":
			w.Write([]byte(`{"items":[{"n":7}]}`))
		case "/v1/a":
			w.Write([]byte(`{"n":1}`))
		case "/v1/b":
			w.Write([]byte(`{"n":2}`))
		case "/v1/check":
			w.Write([]byte(`{"ok":` + r.URL.Query().Get("ok") + `}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":"no such thing"}`))
		}
	})
	type item struct {
		N int `json:"n"`
	}
	type feed struct {
		Items []item `json:"items"`
	}
	type pair struct {
		A *item `json:"a"`
		B *item `json:"b"`
	}
	type verdict struct {
		OK *bool `json:"ok"`
	}
	newTree := func() *cobra.Command {
		o := &clientOpts{}
		r := &cobra.Command{Use: "appliance", SilenceUsage: true, SilenceErrors: true}
		var follow bool
		r.AddCommand(newAPICmd(o, apiCmd[feed]{
			Use: "feed", OwnJSON: "one object per line",
			Flags: func(f *pflag.FlagSet) { f.BoolVar(&follow, "follow", false, "") },
			Stream: func(*call) (string, string, bool) {
				if !follow {
					return "", "", false
				}
				return "/v1/feed/stream", "", false
			},
			Event: func(x *call, ev sseEvent) error {
				if x.json {
					return printJSONLine(x.out(), ev.Data)
				}
				return x.printf("%s %s %s\n", ev.ID, ev.Type, ev.Data)
			},
			Path: func(*call) string { return "/v1/feed" },
			Print: func(x *call, f *feed) error {
				for _, it := range f.Items {
					if x.json {
						printJSONLine(x.out(), it)
					} else {
						x.printf("item %d\n", it.N)
					}
				}
				return nil
			},
		}))
		var missingB bool
		r.AddCommand(newAPICmd(o, apiCmd[pair]{
			Use: "pair", JSON: true, JSONHelp: "print both answers",
			Flags: func(f *pflag.FlagSet) { f.BoolVar(&missingB, "missing-b", false, "") },
			Fetch: func(x *call, p *pair) ([]byte, error) {
				if err := x.cl.do(x.c.Context(), http.MethodGet, "/v1/a", nil, &p.A); err != nil {
					return nil, err
				}
				b := "/v1/b"
				if missingB {
					b = "/v1/nothing"
				}
				if err := x.cl.do(x.c.Context(), http.MethodGet, b, nil, &p.B); err != nil {
					return nil, err
				}
				return json.Marshal(p)
			},
			Print: func(x *call, p *pair) error { return x.printf("%d+%d\n", p.A.N, p.B.N) },
		}))
		var ok string
		r.AddCommand(newAPICmd(o, apiCmd[verdict]{
			Use: "check", JSON: true, Confirm: "confirm", Unconfirmed: "check has no undo",
			Flags: func(f *pflag.FlagSet) { f.StringVar(&ok, "ok", "true", "") },
			Path:  func(*call) string { return "/v1/check?ok=" + ok },
			Need:  func(v *verdict) string { return missing(v.OK == nil, "verdict") },
			Print: func(x *call, v *verdict) error { return x.printf("ok: %t\n", *v.OK) },
			Exit: func(_ *call, v *verdict) error {
				if !*v.OK {
					return fmt.Errorf("the check failed")
				}
				return nil
			},
		}))
		return r
	}
	run := func(args ...string) (string, error) {
		out, _, err := runTree(t, newTree(), args...)
		return out, err
	}

	// Stream: each event to Event until the stream ends; declined, the request and Print instead.
	if out, err := run("feed", "--follow"); err != nil || out != "1 made {\"n\":1}\n2 made {\"n\":2}\n" {
		t.Errorf("feed --follow: %v\n%q", err, out)
	}
	if out, err := run("feed", "--follow", "--json"); err != nil || out != "{\"n\":1}\n{\"n\":2}\n" {
		t.Errorf("feed --follow --json: %v\n%q", err, out)
	}
	if out, err := run("feed"); err != nil || out != "item 7\n" {
		t.Errorf("feed: %v\n%q", err, out)
	}
	if out, err := run("feed", "--json"); err != nil || out != "{\"n\":7}\n" {
		t.Errorf("feed --json (the command's own): %v\n%q", err, out)
	}
	// Fetch: several calls, printed together; --json is what Fetch returned; a failed call is the error.
	if out, err := run("pair"); err != nil || out != "1+2\n" {
		t.Errorf("pair: %v\n%q", err, out)
	}
	if out, err := run("pair", "--json"); err != nil || out != "{\n  \"a\": {\n    \"n\": 1\n  },\n  \"b\": {\n    \"n\": 2\n  }\n}\n" {
		t.Errorf("pair --json: %v\n%q", err, out)
	}
	if _, err := run("pair", "--missing-b"); err == nil || err.Error() != "GET /v1/nothing: 404 Not Found: no such thing" {
		t.Errorf("pair with a failing call: %v", err)
	}
	// Confirm refuses before any request; Exit gives the status with and without --json, after the answer
	// was checked (Need) and printed.
	before := requests.Load()
	if out, err := run("check"); err == nil || err.Error() != "check has no undo; pass --confirm" || out != "" || requests.Load() != before {
		t.Errorf("check without --confirm: %v\n%q", err, out)
	}
	if out, err := run("check", "--confirm"); err != nil || out != "ok: true\n" {
		t.Errorf("check: %v\n%q", err, out)
	}
	if out, err := run("check", "--confirm", "--ok", "false"); err == nil || err.Error() != "the check failed" || out != "ok: false\n" {
		t.Errorf("check failing: %v\n%q", err, out)
	}
	if out, err := run("check", "--confirm", "--ok", "false", "--json"); err == nil || err.Error() != "the check failed" || out != "{\n  \"ok\": false\n}\n" {
		t.Errorf("check failing, --json: %v\n%q", err, out)
	}
	if out, err := run("check", "--confirm", "--ok", "null", "--json"); err == nil || err.Error() != "GET /v1/check: unexpected response: no verdict" || out != "" {
		t.Errorf("check answered without its verdict, --json: %v\n%q", err, out)
	}
}

// runTree runs args on the command tree r and returns what it printed on standard output and standard
// error.
func runTree(t *testing.T, r *cobra.Command, args ...string) (string, string, error) {
	var out, errw strings.Builder
	r.SetOut(&out)
	r.SetErr(&errw)
	r.SetArgs(args)
	err := r.ExecuteContext(t.Context())
	return out.String(), errw.String(), err
}
