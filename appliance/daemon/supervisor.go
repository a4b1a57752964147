package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Process is what a Supervisor keeps running: a PostgreSQL instance, a pooler, a key-value store's server.
// Each is a daemon found through its pid file, so a restarted appliance adopts the processes the previous
// one started.
type Process interface {
	Status() (pid int, running bool, err error)
	Start(ctx context.Context, ex ExecFunc) error
	Stop(ctx context.Context, ex ExecFunc, mode StopMode) error
}

// Readier is a Process that can tell when it serves: the supervisor reports a restart (EventRestarted) only
// once Ready returned, so that a server reported back accepts connections.
type Readier interface {
	Ready(ctx context.Context) error // waits until it serves, or fails when ctx ends first
}

// StopMode is how a process is stopped (pg_ctl's shutdown modes; other daemons map them to signals).
type StopMode string

const (
	StopSmart     StopMode = "smart"     // wait for clients to disconnect
	StopFast      StopMode = "fast"      // disconnect clients, shut down cleanly
	StopImmediate StopMode = "immediate" // quit at once: crash recovery on the next start
)

// EventKind says what happened to a watched process.
type EventKind string

const (
	EventDied          EventKind = "died"           // it was running and is not any more
	EventRestarted     EventKind = "restarted"      // the supervisor started it again
	EventRestartFailed EventKind = "restart_failed" // a start attempt failed; another follows after a backoff
)

// Event is reported through Supervisor.OnEvent.
type Event struct {
	Key  string
	Kind EventKind
	PID  int   // the old pid for died, the new one for restarted
	Err  error // why, when known
	At   time.Time
}

// ErrSupervisorStopped is returned by Watch after Stop.
var ErrSupervisorStopped = errors.New("supervisor is stopped")

// Supervisor keeps the watched processes running: every Interval it checks each one, and starts
// a dead one again at once, then with an exponential backoff (MinBackoff doubling up to MaxBackoff) while it
// keeps dying; running HealthyAfter long resets the backoff, so a healthy process that is killed now and then
// is started again at once each time. Set the exported fields before the first Watch.
type Supervisor struct {
	OnEvent    func(Event)   // called one event at a time, from the supervisor's goroutines: do not block
	Exec       ExecFunc      // runs the programs of restarts (pg_ctl …); nil: DefaultExec
	Interval   time.Duration // 0: 1 s
	MinBackoff time.Duration // 0: 1 s
	MaxBackoff time.Duration // 0: 1 min
	// HealthyAfter is how long a process must have run for its next death to be restarted at once, with the
	// backoff starting over (0: DefaultHealthyAfter).
	HealthyAfter time.Duration

	mu      sync.Mutex
	watched map[string]*watched
	started bool
	stopped bool
	stopCh  chan struct{}
	kick    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup // restarts in flight
	evMu    sync.Mutex
}

type watched struct {
	key       string
	target    Process
	running   bool
	pid       int
	failures  int           // start attempts since it last ran HealthyAfter long
	next      time.Time     // no start attempt before
	lastStart time.Time     // the last start attempt
	upSince   time.Time     // when it was last seen starting to run
	idle      chan struct{} // non-nil while a start attempt is in flight; closed when it ends
	removed   bool
	followed  int // the pid whose exit a goroutine waits for (0: none)
}

// NewSupervisor returns a supervisor; it starts no goroutine until the first Watch.
func NewSupervisor() *Supervisor {
	return &Supervisor{watched: map[string]*watched{},
		stopCh: make(chan struct{}), kick: make(chan struct{}, 1), done: make(chan struct{})}
}

func (s *Supervisor) interval() time.Duration { return durOr(s.Interval, time.Second) }
func (s *Supervisor) minBackoff() time.Duration {
	return durOr(s.MinBackoff, time.Second)
}
func (s *Supervisor) maxBackoff() time.Duration { return durOr(s.MaxBackoff, time.Minute) }
func (s *Supervisor) healthyAfter() time.Duration {
	return durOr(s.HealthyAfter, DefaultHealthyAfter)
}

// DefaultHealthyAfter is Supervisor.HealthyAfter's default: a process that ran this long was healthy.
const DefaultHealthyAfter = 10 * time.Second

func durOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// backoff is the wait after the n-th start attempt in a row.
func (s *Supervisor) backoff(n int) time.Duration {
	d := s.minBackoff()
	for i := 1; i < n && d < s.maxBackoff(); i++ {
		d *= 2
	}
	return min(d, s.maxBackoff())
}

// Watch keeps target running under key (replacing what key watched before): it is checked at once, and
// started (soon, by the supervisor's goroutine) if it does not run. After Stop, Watch stops target and
// returns ErrSupervisorStopped.
func (s *Supervisor) Watch(key string, target Process) error {
	// The first look is synchronous: a process running now and dead later is reported as died.
	w := &watched{key: key, target: target}
	w.pid, w.running, _ = target.Status()
	if w.running {
		w.upSince = time.Now()
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		// Stop stopped everything it watched; a process handed over later (a job finishing during the
		// shutdown) must not outlive it either.
		if w.running {
			_ = target.Stop(context.Background(), OrDefault(s.Exec), StopFast)
		}
		return ErrSupervisorStopped
	}
	if old := s.watched[key]; old != nil {
		old.removed = true
	}
	s.watched[key] = w
	if !s.started {
		s.started = true
		go s.loop()
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

// Unwatch stops watching key, waiting for a start attempt in flight to end. The process is left as it is.
func (s *Supervisor) Unwatch(key string) {
	s.mu.Lock()
	w := s.watched[key]
	if w == nil {
		s.mu.Unlock()
		return
	}
	delete(s.watched, key)
	w.removed = true
	idle := w.idle
	s.mu.Unlock()
	if idle != nil {
		<-idle
	}
}

func (s *Supervisor) loop() {
	defer close(s.done)
	t := time.NewTicker(s.interval())
	defer t.Stop()
	for {
		select {
		case <-s.stopCh:
			return
		case <-t.C:
		case <-s.kick:
		}
		s.check()
	}
}

// check looks at every watched process not being started, and starts those that do not run.
func (s *Supervisor) check() {
	s.mu.Lock()
	ws := make([]*watched, 0, len(s.watched))
	for _, w := range s.watched {
		if w.idle == nil {
			ws = append(ws, w)
		}
	}
	s.mu.Unlock()
	for _, w := range ws {
		pid, running, err := w.target.Status()
		now := time.Now()
		var died *Event
		s.mu.Lock()
		if w.removed || w.idle != nil || s.stopped {
			s.mu.Unlock()
			continue
		}
		if running {
			if !w.running {
				w.upSince = now
			}
			w.running, w.pid = true, pid
			if w.failures > 0 && now.Sub(w.upSince) >= s.healthyAfter() {
				w.failures = 0
			}
			s.followLocked(w, pid)
			s.mu.Unlock()
			continue
		}
		if w.running {
			died = &Event{Key: w.key, Kind: EventDied, PID: w.pid, Err: err, At: now}
			if now.Sub(w.upSince) >= s.healthyAfter() {
				// It was healthy: this death is no crash loop, it is started again at once.
				w.failures, w.next = 0, time.Time{}
			}
		}
		w.running = false
		start := !now.Before(w.next)
		if start {
			w.idle = make(chan struct{})
			w.lastStart = now
			s.wg.Add(1)
		}
		s.mu.Unlock()
		if died != nil {
			s.emit(*died)
		}
		if start {
			go s.restart(w)
		}
	}
}

// restart makes one start attempt.
func (s *Supervisor) restart(w *watched) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	err := w.target.Start(ctx, OrDefault(s.Exec))
	pid, running, serr := w.target.Status()
	if err == nil && !running {
		err = errors.Join(errors.New("not running after a successful start"), serr)
	}
	if r, ok := w.target.(Readier); ok && err == nil {
		if rerr := r.Ready(ctx); rerr != nil {
			err = fmt.Errorf("started, but not serving: %w", rerr)
		}
	}
	cancel()
	now := time.Now()
	s.mu.Lock()
	w.failures++
	w.next = now.Add(s.backoff(w.failures)) // counted from the end of the attempt
	if err == nil {
		w.running, w.pid, w.upSince = true, pid, now
		s.followLocked(w, pid)
	}
	close(w.idle)
	w.idle = nil
	s.mu.Unlock()
	if err != nil {
		s.emit(Event{Key: w.key, Kind: EventRestartFailed, Err: err, At: now})
	} else {
		s.emit(Event{Key: w.key, Kind: EventRestarted, PID: pid, At: now})
	}
}

// followLocked waits, in a goroutine, for the process pid to exit (a pidfd becomes readable then) and
// checks at once when it does: a death is seen in milliseconds, not at the next tick. Without pidfd
// (an old kernel) the tick alone notices. s.mu is held.
func (s *Supervisor) followLocked(w *watched, pid int) {
	if w.followed == pid || pid <= 0 {
		return
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	w.followed = pid
	go func() {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, 1000)
			if n > 0 {
				break // it exited
			}
			if err != nil && !errors.Is(err, unix.EINTR) {
				return
			}
			select {
			case <-s.stopCh:
				return
			default:
			}
			s.mu.Lock()
			gone := w.removed || w.followed != pid
			s.mu.Unlock()
			if gone {
				return
			}
		}
		s.mu.Lock()
		if w.followed == pid {
			w.followed = 0
		}
		s.mu.Unlock()
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}()
}

func (s *Supervisor) emit(e Event) {
	if s.OnEvent == nil {
		return
	}
	s.evMu.Lock()
	defer s.evMu.Unlock()
	s.OnEvent(e)
}

// Stop stops watching and stops every watched process (fast mode), all in parallel, waiting for them
// unless ctx ends first. A second Stop does nothing.
func (s *Supervisor) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	started := s.started
	ws := make([]*watched, 0, len(s.watched))
	for _, w := range s.watched {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	close(s.stopCh)
	idle := make(chan struct{})
	go func() {
		if started {
			<-s.done
		}
		s.wg.Wait()
		close(idle)
	}()
	select {
	case <-idle:
	case <-ctx.Done():
		return fmt.Errorf("stop supervisor: waiting for restarts in flight: %w", context.Cause(ctx))
	}
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for n, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.target.Stop(ctx, OrDefault(s.Exec), StopFast); err != nil {
				errs[n] = fmt.Errorf("stop %s: %w", w.key, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Health reports how many watched processes run.
func (s *Supervisor) Health(ctx context.Context) (status, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	running, starting := 0, 0
	for _, w := range s.watched {
		if w.running {
			running++
		} else if w.idle != nil {
			starting++
		}
	}
	status = "operational"
	if running < len(s.watched) {
		status = "degraded"
	}
	return status, fmt.Sprintf("%d of %d watched processes running, %d restarting", running, len(s.watched), starting)
}
