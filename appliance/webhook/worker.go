package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/theappliance/appliance/appliance/outbound"
	"github.com/theappliance/appliance/scheduler/lane"
)

// Options tune deliveries; DefaultOptions are what the appliance runs with (tests shorten the schedule).
type Options struct {
	// Schedule is the wait before each retry: attempt n+1 comes Schedule[n-1] after attempt n fails.
	// max_attempts is len(Schedule)+1.
	Schedule     []time.Duration
	Timeout      time.Duration // one attempt, connection to the end of the headers
	Workers      int           // attempts in flight at once
	PerEndpoint  int           // attempts in flight to one endpoint at once (a dead one holds no more)
	FailingAfter int           // consecutive failed attempts that make an endpoint's health "failing"
	DisableAfter time.Duration // an endpoint with nothing but failures for this long is disabled
	Poll         time.Duration // how often due retries are looked for (new deliveries start at once)
}

// DefaultOptions: Svix's schedule (immediately, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h), and its
// rule of disabling an endpoint after 5 days of failures.
var DefaultOptions = Options{
	Schedule: []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour},
	Timeout:  10 * time.Second, Workers: 32, PerEndpoint: 4, FailingAfter: 3, DisableAfter: 5 * 24 * time.Hour, Poll: time.Second,
}

// MaxAttempts is a delivery's number of attempts: the first and one per retry of the schedule.
func (o Options) MaxAttempts() int { return len(o.Schedule) + 1 }

// RetryWait is the wait before the next attempt of a delivery whose attempt number attempts failed with
// res: the schedule's, up to 10 % later (so retries spread), or the receiver's Retry-After when that is
// later (at most a day).
func (o Options) RetryWait(attempts int, res Result) time.Duration {
	wait := o.Schedule[min(attempts-1, len(o.Schedule)-1)]
	wait += time.Duration(rand.Int64N(int64(wait)/10 + 1))
	if res.RetryAfter > wait {
		wait = min(res.RetryAfter, 24*time.Hour)
	}
	return wait
}

// AttemptError is what a tenant learns of a failed attempt ("" for a success): the HTTP status, or that
// the outbound policy refused the destination, or that no response came (never what answered or why a
// connection failed).
func (o Options) AttemptError(res Result) string {
	switch {
	case res.Err != nil && errors.Is(res.Err, outbound.ErrRefused):
		return outbound.ErrRefused.Error()
	case res.Err != nil:
		return "no response: could not connect, or no answer within " + o.Timeout.String()
	case res.Status >= 300 && res.Status < 400:
		return fmt.Sprintf("HTTP %d (redirects are not followed)", res.Status)
	case !res.OK():
		return fmt.Sprintf("HTTP %d", res.Status)
	}
	return ""
}

// Claim is a due delivery the worker holds: from its claim until its outcome is recorded.
type Claim[E any] struct {
	ID         string // the delivery's: the webhook-id
	EndpointID string // what PerEndpoint counts by
	URL        string
	Endpoint   E // the store's record of the endpoint, handed back to Store.Secrets
	Body       []byte
}

// Held is what the worker has under way, as Store.Due sees it (under the worker's lock).
type Held interface {
	// Room is how many more attempts the endpoint may have in flight.
	Room(endpointID string) int
	// Holds reports a delivery claimed and not yet recorded (it may still be due in the store).
	Holds(deliveryID string) bool
}

// Store is what the worker needs of the records of endpoints and deliveries (the appliance implements it).
type Store[E any] interface {
	// ReleaseClaims makes due now the deliveries an older version left claimed in the store (a claim now
	// lives in memory only).
	ReleaseClaims() error
	// Due returns up to free due deliveries that held does not hold, at most held.Room of each endpoint;
	// the endpoints take turns being served first (turn counts the calls: round robin).
	Due(turn, free int, held Held) ([]Claim[E], error)
	// Secrets returns the endpoint's opened signing secrets (the current one, and the previous one during
	// a rotation's overlap).
	Secrets(ep E) ([]string, error)
	// Record stores an attempt's outcome and returns once it is stored.
	Record(deliveryID string, res Result) error
}

// Worker delivers: new deliveries at once (Poke), retries when due, at most Workers attempts in flight and
// PerEndpoint to one endpoint. Which deliveries are in flight is known to this process only (a claim
// writes nothing): a delivery stays due in the store until its outcome is recorded, so one in flight when
// the process dies is sent again at the next start (at least once; the same webhook-id).
type Worker[E any] struct {
	opts   Options
	store  Store[E]
	sender *Sender
	lane   *lane.Lane
	now    func() time.Time
	log    *slog.Logger
	kick   chan struct{}
	turn   int // which endpoint claims first next (the loop's goroutine only)

	running atomic.Bool
	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when the loop and its attempts ended
}

// NewWorker returns a worker for the deliveries of st, dialing every attempt through dial (the outbound
// policy), stamping them with now. Its claims and the CPU work of its attempts run in ln (the background
// lane; nil: in the worker's goroutines, unpaced).
func NewWorker[E any](o Options, st Store[E], dial func(ctx context.Context, network, addr string) (net.Conn, error),
	now func() time.Time, log *slog.Logger, ln *lane.Lane) *Worker[E] {
	return &Worker[E]{opts: o, store: st, sender: NewSender(dial, o.Timeout, ln), lane: ln, now: now, log: log,
		kick: make(chan struct{}, 1)}
}

// Options are the worker's options.
func (w *Worker[E]) Options() Options { return w.opts }

// Running reports that the worker was started and has not stopped.
func (w *Worker[E]) Running() bool { return w.running.Load() }

// Poke tells the worker a delivery is due now.
func (w *Worker[E]) Poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Start runs the worker until Stop (ctx's values are kept, not its end). A worker starts once.
func (w *Worker[E]) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("webhook worker: already started")
	}
	w.started = true
	ctx, w.cancel = context.WithCancel(context.WithoutCancel(ctx))
	w.done = make(chan struct{})
	w.running.Store(true)
	go func() {
		defer close(w.done)
		defer w.running.Store(false)
		defer w.sender.Close()
		w.run(ctx)
	}()
	return nil
}

// Stop ends the worker: attempts under way are cut short (not recorded: they stay due), and it returns
// once the worker and its attempts ended, or ctx did. Stop is idempotent; before Start it does nothing.
func (w *Worker[E]) Stop(ctx context.Context) error {
	w.mu.Lock()
	cancel, done := w.cancel, w.done
	w.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("webhook worker: stop: %w", ctx.Err())
	}
}

// run claims and attempts until ctx ends, then waits for the attempts.
func (w *Worker[E]) run(ctx context.Context) {
	if err := w.store.ReleaseClaims(); err != nil {
		w.log.Error("webhooks: release claims", "err", err)
	}
	f := &inFlight{perEndpoint: w.opts.PerEndpoint, slots: map[string]int{}, claimed: map[string]bool{}}
	var wg sync.WaitGroup
	defer wg.Wait() // attempts record before the worker ends
	freed := make(chan struct{}, 1)
	tick := time.NewTicker(w.opts.Poll)
	defer tick.Stop()
	for {
		f.Lock()
		free := w.opts.Workers - f.busy()
		f.Unlock()
		if free > 0 {
			var claimed []Claim[E]
			var err error
			w.lane.Do(func() { // the lane, then f's lock: attempts' callbacks take it outside the lane
				f.Lock()
				defer f.Unlock()
				turn := w.turn
				w.turn++
				if claimed, err = w.store.Due(turn, w.opts.Workers-f.busy(), f); err == nil {
					for _, c := range claimed {
						f.take(c.ID, c.EndpointID)
					}
				}
			})
			if err != nil {
				w.log.Error("webhooks: claim", "err", err)
			}
			for _, c := range claimed {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// The slot is free once the receiver answered; the delivery stays claimed until its
					// outcome is recorded (it is due in the store until then).
					w.attempt(ctx, c, func() {
						f.Lock()
						f.freeSlot(c.EndpointID)
						f.Unlock()
						select {
						case freed <- struct{}{}:
						default:
						}
					}, func() {
						f.Lock()
						delete(f.claimed, c.ID)
						f.Unlock()
					})
				}()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		case <-freed:
		case <-tick.C:
		}
	}
}

// inFlight is what the worker has under way, under its lock: the worker slots taken, by endpoint, and
// the deliveries claimed, from their claim until their outcome is recorded (a slot is free once the
// receiver answered, before that).
type inFlight struct {
	sync.Mutex
	perEndpoint int
	slots       map[string]int
	claimed     map[string]bool
}

var _ Held = (*inFlight)(nil)

// busy is the number of slots taken.
func (f *inFlight) busy() int {
	n := 0
	for _, k := range f.slots {
		n += k
	}
	return n
}

func (f *inFlight) Room(endpointID string) int { return f.perEndpoint - f.slots[endpointID] }

func (f *inFlight) Holds(deliveryID string) bool { return f.claimed[deliveryID] }

func (f *inFlight) take(deliveryID, endpointID string) {
	f.slots[endpointID]++
	f.claimed[deliveryID] = true
}

func (f *inFlight) freeSlot(endpointID string) {
	if f.slots[endpointID]--; f.slots[endpointID] == 0 {
		delete(f.slots, endpointID)
	}
}

// attempt sends a claimed delivery once, calls sent, records the outcome, then calls release (which ends
// the claim). An attempt that could not be made or recorded keeps its claim for a while (the timeout and
// half a minute), so a delivery that meets a persistent error is not tried in a loop; one cut short by
// shutdown is not recorded: the delivery stays due and the next start sends it again.
func (w *Worker[E]) attempt(ctx context.Context, c Claim[E], sent, release func()) {
	secrets, err := w.store.Secrets(c.Endpoint)
	if err != nil {
		sent()
		w.log.Error("webhooks: open secret", "endpoint", c.EndpointID, "err", err)
		time.AfterFunc(w.opts.Timeout+30*time.Second, release)
		return
	}
	res := w.sender.Send(ctx, Message{URL: c.URL, ID: c.ID, Time: w.now(), Body: c.Body, Secrets: secrets})
	sent()
	if ctx.Err() != nil {
		return
	}
	if err := w.store.Record(c.ID, res); err != nil {
		w.log.Error("webhooks: record attempt", "delivery", c.ID, "err", err)
		time.AfterFunc(w.opts.Timeout+30*time.Second, release)
		return
	}
	release()
}
