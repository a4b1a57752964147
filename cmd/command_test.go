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
	run := func(args ...string) (string, string, error) {
		r := newTree()
		var out, errw strings.Builder
		r.SetOut(&out)
		r.SetErr(&errw)
		r.SetArgs(args)
		err := r.ExecuteContext(t.Context())
		return out.String(), errw.String(), err
	}

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
