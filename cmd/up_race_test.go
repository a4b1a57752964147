package cmd

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/appliancetest"
)

// inProcessUp is an up running in the test's process (so that the race detector sees it).
type inProcessUp struct {
	out  *appliancetest.Output
	stop context.CancelFunc
	done chan error
	url  string
}

// startUpInProcess runs runUp until it says it is up; stop ends it and returns what runUp returned.
func startUpInProcess(t *testing.T, cfg UpConfig) *inProcessUp {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	u := &inProcessUp{out: &appliancetest.Output{}, stop: cancel, done: make(chan error, 1)}
	go func() { u.done <- runUp(ctx, cfg, u.out) }()
	t.Cleanup(func() { u.shutdown(t) })
	api := regexp.MustCompile(`API:\s+(https://\S+)`)
	waitCLI(t, func() bool {
		select {
		case err := <-u.done:
			u.done <- err
			t.Fatalf("up ended before it was up: %v\n%s", err, u.out.String())
		default:
		}
		m := api.FindStringSubmatch(u.out.String())
		if m != nil {
			u.url = m[1]
		}
		return m != nil
	})
	return u
}

// shutdown stops up and waits for it (once).
func (u *inProcessUp) shutdown(t *testing.T) {
	t.Helper()
	if u.done == nil {
		return
	}
	u.stop()
	select {
	case err := <-u.done:
		if err != nil {
			t.Errorf("up: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Errorf("up did not stop:\n%s", u.out.String())
	}
	u.done = nil
}

// TestUpStartsWithAWebhookDue starts up in the test's process (run it with -race) on a data directory
// whose webhook delivery is due, so that the webhook worker sends it while the later components start:
// the outbound policy it reads is complete before the worker starts (the key-value fronts' ports were
// once appended to it afterwards, a data race).
func TestUpStartsWithAWebhookDue(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := 0
	first := make(chan struct{})
	rc := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got++
		n := got
		mu.Unlock()
		if n == 1 { // the first attempt hangs until up stops: it stays due for the next start
			close(first)
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go rc.Serve(ln)
	t.Cleanup(func() { rc.Close() })
	received := func() int { mu.Lock(); defer mu.Unlock(); return got }

	cfg := upConfig(t, "--spare-clusters", "0", "--outbound-allow", "127.0.0.1/32")
	a := startUpInProcess(t, cfg)
	boot, err := os.ReadFile(filepath.Join(cfg.DataDir, "bootstrap.json"))
	if err != nil {
		t.Fatal(err)
	}
	var creds struct {
		APIKey         string `json:"api_key"`
		OrganizationID string `json:"organization_id"`
	}
	if err := json.Unmarshal(boot, &creds); err != nil {
		t.Fatal(err)
	}
	cl, err := newAPIClient(a.url, creds.APIKey, filepath.Join(cfg.DataDir, "ca", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	hooks := "/v1/organizations/" + creds.OrganizationID + "/webhook-endpoints"
	var created struct {
		WebhookEndpoint struct{ ID string } `json:"webhook_endpoint"`
	}
	if err := cl.do(t.Context(), "POST", hooks, map[string]any{"url": "http://" + ln.Addr().String() + "/hooks"}, &created); err != nil {
		t.Fatal(err)
	}
	if err := cl.do(t.Context(), "POST", hooks+"/"+created.WebhookEndpoint.ID+"/test", nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first:
	case <-time.After(time.Minute):
		t.Fatal("the receiver saw no delivery")
	}
	a.shutdown(t)

	// The next start sends the delivery again at once, while it starts its other components.
	b := startUpInProcess(t, cfg)
	waitCLI(t, func() bool { return received() >= 2 })
	b.shutdown(t)
	if !strings.Contains(b.out.String(), "is up") {
		t.Errorf("second start:\n%s", b.out.String())
	}
}
