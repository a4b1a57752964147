package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/outbound"
	"github.com/theappliance/appliance/scheduler/lane"
)

// fakeEndpoint is the fake store's record of an endpoint.
type fakeEndpoint struct {
	id, url, secret string
	secretErr       error
}

type fakeDelivery struct {
	id   string
	ep   *fakeEndpoint
	body []byte
	due  bool
}

// fakeStore keeps endpoints and deliveries in memory: a recorded outcome ends a delivery (it is no longer
// due), whatever it was.
type fakeStore struct {
	mu         sync.Mutex
	cond       *sync.Cond
	eps        []*fakeEndpoint
	deliveries []*fakeDelivery
	released   bool
	dueCalls   int
	secretHits int
	records    map[string][]Result
}

var _ Store[*fakeEndpoint] = (*fakeStore)(nil)

func newFakeStore(eps ...*fakeEndpoint) *fakeStore {
	st := &fakeStore{eps: eps, records: map[string][]Result{}}
	st.cond = sync.NewCond(&st.mu)
	return st
}

func (st *fakeStore) add(ep *fakeEndpoint, n int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for range n {
		id := fmt.Sprintf("msg_%d", len(st.deliveries)+1)
		st.deliveries = append(st.deliveries, &fakeDelivery{id: id, ep: ep, body: []byte(`{"id":"` + id + `"}`), due: true})
	}
}

func (st *fakeStore) ReleaseClaims() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.released = true
	return nil
}

func (st *fakeStore) Due(turn, free int, held Held) ([]Claim[*fakeEndpoint], error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	defer st.cond.Broadcast()
	st.dueCalls++
	var out []Claim[*fakeEndpoint]
	for i := range st.eps {
		ep := st.eps[(turn+i)%len(st.eps)]
		n := min(held.Room(ep.id), free-len(out))
		for _, d := range st.deliveries {
			if n <= 0 {
				break
			}
			if d.ep != ep || !d.due || held.Holds(d.id) {
				continue
			}
			out = append(out, Claim[*fakeEndpoint]{ID: d.id, EndpointID: ep.id, URL: ep.url, Endpoint: ep, Body: d.body})
			n--
		}
	}
	return out, nil
}

func (st *fakeStore) Secrets(ep *fakeEndpoint) ([]string, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	defer st.cond.Broadcast()
	st.secretHits++
	if ep.secretErr != nil {
		return nil, ep.secretErr
	}
	return []string{ep.secret}, nil
}

func (st *fakeStore) Record(deliveryID string, res Result) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	defer st.cond.Broadcast()
	st.records[deliveryID] = append(st.records[deliveryID], res)
	for _, d := range st.deliveries {
		if d.id == deliveryID {
			d.due = false
		}
	}
	return nil
}

// waitFor waits until ok holds (under the store's lock), failing the test after a minute.
func (st *fakeStore) waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	stop := time.AfterFunc(time.Minute, func() { st.mu.Lock(); st.cond.Broadcast(); st.mu.Unlock() })
	defer stop.Stop()
	deadline := time.Now().Add(time.Minute)
	st.mu.Lock()
	defer st.mu.Unlock()
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		st.cond.Wait()
	}
}

func testOptions() Options {
	o := DefaultOptions
	o.Timeout, o.Poll = 5*time.Second, time.Hour // only pokes and freed slots start claims
	return o
}

func startWorker(t *testing.T, o Options, st *fakeStore) *Worker[*fakeEndpoint] {
	t.Helper()
	ln := lane.New(1) // as up gives it a background lane
	t.Cleanup(ln.Close)
	w := NewWorker(o, st, dialer.DialContext, time.Now, slog.New(slog.DiscardHandler), ln)
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return w
}

// TestWorkerDeliversWithinLimits: every due delivery is sent once, signed with its endpoint's secret, and
// its outcome recorded; never more than Workers attempts are in flight, nor PerEndpoint to one endpoint.
// Stop is idempotent and the worker starts once.
func TestWorkerDeliversWithinLimits(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	inFlight := map[string]int{}
	var total, maxTotal int
	maxPer := map[string]int{}
	gate, arrived := make(chan struct{}), make(chan struct{}, 12)
	secrets := map[string]string{"a": NewSecret(), "b": NewSecret()}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ep := r.URL.Path[1:]
		body, _ := io.ReadAll(r.Body)
		if err := Verify(secrets[ep], r.Header, body, time.Now(), time.Minute); err != nil {
			t.Errorf("endpoint %s cannot verify delivery %s: %v", ep, r.Header.Get("webhook-id"), err)
		}
		if want := `{"id":"` + r.Header.Get("webhook-id") + `"}`; string(body) != want {
			t.Errorf("body %s, want %s", body, want)
		}
		mu.Lock()
		inFlight[ep]++
		total++
		maxPer[ep] = max(maxPer[ep], inFlight[ep])
		maxTotal = max(maxTotal, total)
		mu.Unlock()
		arrived <- struct{}{}
		<-gate
		mu.Lock()
		inFlight[ep]--
		total--
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	a := &fakeEndpoint{id: "a", url: srv.URL + "/a", secret: secrets["a"]}
	b := &fakeEndpoint{id: "b", url: srv.URL + "/b", secret: secrets["b"]}
	st := newFakeStore(a, b)
	st.add(a, 6)
	st.add(b, 6)
	o := testOptions()
	o.Workers, o.PerEndpoint = 3, 2
	w := startWorker(t, o, st)
	if !w.Running() {
		t.Error("not running after Start")
	}
	if err := w.Start(t.Context()); err == nil {
		t.Error("a second Start succeeded")
	}
	for range 3 { // the slots are full until the receiver answers
		<-arrived
	}
	close(gate)
	st.waitFor(t, "every outcome", func() bool { return len(st.records) == 12 })
	st.mu.Lock()
	for id, rs := range st.records {
		if len(rs) != 1 || !rs[0].OK() {
			t.Errorf("delivery %s: outcomes %+v, want one 2xx", id, rs)
		}
	}
	released := st.released
	st.mu.Unlock()
	if !released {
		t.Error("the claims an older version left were not released at start")
	}
	mu.Lock()
	if maxTotal > 3 || maxPer["a"] > 2 || maxPer["b"] > 2 {
		t.Errorf("in flight at most %d in all, %d to a, %d to b; want 3 and 2", maxTotal, maxPer["a"], maxPer["b"])
	}
	mu.Unlock()
	for range 2 {
		if err := w.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if w.Running() {
		t.Error("running after Stop")
	}
}

// TestWorkerStopCutsAttempts: Stop cuts an attempt under way short and returns; the cut attempt is not
// recorded (the delivery stays due, for the next start).
func TestWorkerStopCutsAttempts(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the server notices the client's end once the body was read
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	ep := &fakeEndpoint{id: "a", url: srv.URL, secret: NewSecret()}
	st := newFakeStore(ep)
	st.add(ep, 1)
	w := startWorker(t, testOptions(), st)
	<-arrived
	if err := w.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.records) != 0 || !st.deliveries[0].due {
		t.Errorf("an attempt cut short by Stop was recorded: %+v", st.records)
	}
}

// TestWorkerKeepsFailedClaims: a delivery whose secrets cannot be opened is not sent and keeps its claim
// (it is not tried again at every pass).
func TestWorkerKeepsFailedClaims(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a delivery without its secrets was sent")
	}))
	t.Cleanup(srv.Close)
	ep := &fakeEndpoint{id: "a", url: srv.URL, secretErr: errors.New("sealed with another key")}
	st := newFakeStore(ep)
	st.add(ep, 1)
	w := startWorker(t, testOptions(), st)
	st.waitFor(t, "the secrets asked", func() bool { return st.secretHits == 1 })
	for i := range 3 {
		w.Poke()
		st.waitFor(t, "another pass", func() bool { return st.dueCalls >= i+2 })
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.secretHits != 1 || len(st.records) != 0 {
		t.Errorf("secrets asked %d times, %d outcomes recorded; want 1 and none", st.secretHits, len(st.records))
	}
}

// TestAttemptError: a tenant learns the status, or that the policy refused, or that nothing answered.
func TestAttemptError(t *testing.T) {
	o := DefaultOptions
	for _, c := range []struct {
		res  Result
		want string
	}{
		{Result{Status: 204}, ""},
		{Result{Status: 302}, "HTTP 302 (redirects are not followed)"},
		{Result{Status: 500}, "HTTP 500"},
		{Result{Err: fmt.Errorf("dial: %w", outbound.ErrRefused)}, outbound.ErrRefused.Error()},
		{Result{Err: errors.New("connection refused by 10.0.0.1")}, "no response: could not connect, or no answer within 10s"},
	} {
		if got := o.AttemptError(c.res); got != c.want {
			t.Errorf("%+v: %q, want %q", c.res, got, c.want)
		}
	}
}

// TestRetryWait: the schedule's wait, up to 10 % later, or a later Retry-After (at most a day).
func TestRetryWait(t *testing.T) {
	o := DefaultOptions
	for range 100 {
		if w := o.RetryWait(1, Result{Status: 500}); w < 5*time.Second || w > 5500*time.Millisecond {
			t.Fatalf("first retry after %s", w)
		}
		if w := o.RetryWait(20, Result{Status: 500}); w < 10*time.Hour || w > 11*time.Hour {
			t.Fatalf("retry past the schedule after %s", w)
		}
	}
	if w := o.RetryWait(1, Result{Status: 429, RetryAfter: time.Minute}); w != time.Minute {
		t.Errorf("Retry-After 1m: %s", w)
	}
	if w := o.RetryWait(1, Result{Status: 503, RetryAfter: 48 * time.Hour}); w != 24*time.Hour {
		t.Errorf("Retry-After 48h: %s", w)
	}
	if o.MaxAttempts() != 8 {
		t.Errorf("max attempts %d", o.MaxAttempts())
	}
}
