package acceptance

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/appliancetest"
)

// hangingReceiver hangs every request until it is switched to answering, then answers 204; it records
// the webhook-id of every request, in order.
type hangingReceiver struct {
	mu       sync.Mutex
	ids      []string
	answer   bool
	released chan struct{}
}

func (h *hangingReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.ids = append(h.ids, r.Header.Get("webhook-id"))
	answer := h.answer
	h.mu.Unlock()
	if !answer {
		select {
		case <-h.released:
		case <-r.Context().Done():
		}
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *hangingReceiver) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.ids...)
}

// TestWebhooksSurviveSIGKILL: the real binary SIGKILLed with deliveries in flight (the receiver hangs)
// and pending delivers every one of them after a restart, with the same webhook-id.
func TestWebhooksSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	bin := e2eBuild(t)
	dataDir := appliancetest.TraversableTempDir(t)
	rc := &hangingReceiver{released: make(chan struct{})}
	srv := &http.Server{Handler: rc}
	ln := e2eListenOutside(t, dataDir)
	go srv.Serve(ln)
	t.Cleanup(func() { close(rc.released); srv.Close() })
	url := "http://" + ln.Addr().String() + "/hooks"

	a := e2eStartEnv(t, bin, dataDir, "APPLIANCE_OUTBOUND_ALLOW=127.0.0.0/8")
	key := e2eAdminKey(t, dataDir)
	var me struct {
		Organization struct{ ID string } `json:"organization"`
	}
	a.do(t, key, "GET", "/v1/me", nil, http.StatusOK, &me)
	hooks := "/v1/organizations/" + me.Organization.ID + "/webhook-endpoints"
	var created struct {
		WebhookEndpoint struct{ ID string } `json:"webhook_endpoint"`
	}
	a.do(t, key, "POST", hooks, map[string]any{"url": url, "event_types": []string{"job.completed"}}, http.StatusCreated, &created)
	// Six jobs end: six deliveries, four in flight (the per-endpoint limit) and two pending behind them.
	for range 6 {
		a.waitJob(t, key, a.enqueueSleep(t, key, 0, "").ID)
	}
	for deadline := time.Now().Add(e2eDeadline); len(rc.seen()) < 4; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the receiver saw %d requests, want 4 in flight", len(rc.seen()))
		}
	}
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.waitExit(t)
	inFlight := rc.seen()

	rc.mu.Lock()
	rc.answer = true
	rc.mu.Unlock()
	b := e2eStartEnv(t, bin, dataDir, "APPLIANCE_OUTBOUND_ALLOW=127.0.0.0/8")
	type delivery struct {
		ID, State string
		Attempts  int
	}
	var list struct{ Deliveries []delivery }
	for deadline := time.Now().Add(e2eDeadline); ; time.Sleep(50 * time.Millisecond) {
		b.do(t, key, "GET", hooks+"/"+created.WebhookEndpoint.ID+"/deliveries", nil, http.StatusOK, &list)
		done := len(list.Deliveries) == 6
		for _, d := range list.Deliveries {
			done = done && d.State == "delivered"
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries after the restart: %+v", list.Deliveries)
		}
	}
	seen := map[string]int{}
	for _, id := range rc.seen() {
		seen[id]++
	}
	for _, d := range list.Deliveries {
		if seen[d.ID] == 0 {
			t.Errorf("delivery %s is delivered but the receiver never saw its webhook-id", d.ID)
		}
	}
	for _, id := range inFlight {
		if seen[id] < 2 {
			t.Errorf("delivery %s was in flight at the SIGKILL but was not sent again (seen %d times)", id, seen[id])
		}
	}
	if len(seen) != 6 {
		t.Errorf("the receiver saw %d webhook-ids, want 6: %v", len(seen), seen)
	}
}

// e2eListenOutside listens on loopback outside the instance port range of the appliance on dataDir (the
// outbound policy refuses the appliance's own ports).
func e2eListenOutside(t *testing.T, dataDir string) net.Listener {
	t.Helper()
	r := strings.SplitN(e2ePorts(t, dataDir), "-", 2)
	first, _ := strconv.Atoi(r[0])
	last, _ := strconv.Atoi(r[1])
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if p := l.Addr().(*net.TCPAddr).Port; p < first || p > last {
			t.Cleanup(func() { l.Close() })
			return l
		}
		l.Close()
	}
}
