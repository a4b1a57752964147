package lease

import (
	"context"
	"errors"
	"sync"
)

// Single is the membership of a single-node appliance: its node is the only one, always alive, always the
// leader, under no lease (Lease ""). Its term and leadership end only at Stop.
type Single struct {
	node   string
	ctx    context.Context
	cancel context.CancelCauseFunc
	w      watchers
}

var _ Membership = (*Single)(nil)

// errStopped is the cause of the end of a Single's term.
var errStopped = errors.New("the membership stopped")

// NewSingle is the single-node membership of node.
func NewSingle(node string) *Single {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Single{node: node, ctx: ctx, cancel: cancel}
}

func (s *Single) Node() string { return s.node }

func (s *Single) Current() (Term, bool) { return Term{Ctx: s.ctx}, s.ctx.Err() == nil }

func (s *Single) Verify(ctx context.Context, t Term) error {
	if s.ctx.Err() != nil {
		return ErrLost
	}
	return nil
}

func (s *Single) Leading() (context.Context, bool) { return s.ctx, s.ctx.Err() == nil }

func (s *Single) IsLeader() bool { return s.ctx.Err() == nil }

func (s *Single) Alive(ctx context.Context, node string) (bool, error) {
	return node == s.node && s.ctx.Err() == nil, nil
}

func (s *Single) Live(ctx context.Context) ([]Member, error) {
	if s.ctx.Err() != nil {
		return []Member{}, nil
	}
	return []Member{{Node: s.node}}, nil
}

func (s *Single) Leader(ctx context.Context) (string, error) {
	if s.ctx.Err() != nil {
		return "", ErrNoLeader
	}
	return s.node, nil
}

// Watch sends nothing (nothing changes) and is closed when ctx ends or the membership stops.
func (s *Single) Watch(ctx context.Context) <-chan Event { return s.w.add(ctx, s.ctx) }

func (s *Single) Status() Status {
	up := s.ctx.Err() == nil
	return Status{Node: s.node, Held: up, Leader: up}
}

// Start does nothing (the lifecycle contract's).
func (s *Single) Start(ctx context.Context) error { return nil }

// Stop ends the term and the leadership. Idempotent.
func (s *Single) Stop(ctx context.Context) error {
	s.cancel(errStopped)
	s.w.closeAll()
	return nil
}

// watchers are the channels of Watch: each has its own queue and goroutine, so that a slow reader
// neither blocks the membership nor loses events.
type watchers struct {
	mu     sync.Mutex
	subs   map[*watcher]struct{}
	closed bool
}

type watcher struct {
	mu    sync.Mutex
	queue []Event
	wake  chan struct{} // buffered 1
	done  chan struct{} // closed to end it
	once  sync.Once
}

// add makes a watcher that lives until ctx or life ends (or closeAll).
func (ws *watchers) add(ctx, life context.Context) <-chan Event {
	out := make(chan Event)
	w := &watcher{wake: make(chan struct{}, 1), done: make(chan struct{})}
	ws.mu.Lock()
	if ws.closed {
		ws.mu.Unlock()
		close(out)
		return out
	}
	if ws.subs == nil {
		ws.subs = map[*watcher]struct{}{}
	}
	ws.subs[w] = struct{}{}
	ws.mu.Unlock()
	go func() {
		defer close(out)
		defer func() {
			ws.mu.Lock()
			delete(ws.subs, w)
			ws.mu.Unlock()
		}()
		for {
			w.mu.Lock()
			var next *Event
			if len(w.queue) > 0 {
				next = &w.queue[0]
			}
			w.mu.Unlock()
			if next == nil {
				select {
				case <-w.wake:
					continue
				case <-w.done:
					return
				case <-ctx.Done():
					return
				case <-life.Done():
					return
				}
			}
			select {
			case out <- *next:
				w.mu.Lock()
				w.queue = w.queue[1:]
				w.mu.Unlock()
			case <-w.done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// send queues ev for every watcher.
func (ws *watchers) send(ev Event) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.subs {
		w.mu.Lock()
		w.queue = append(w.queue, ev)
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// closeAll ends every watcher at once (what is still queued is dropped: the membership stopped) and
// refuses new ones.
func (ws *watchers) closeAll() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.closed = true
	for w := range ws.subs {
		w.once.Do(func() { close(w.done) })
	}
}
