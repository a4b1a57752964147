package httpapi

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimits are per-IP token buckets: requests per second and burst, with a stricter bucket for the
// unauthenticated sign-in endpoints (CLI login start/poll and session sign-in).
type RateLimits struct {
	PerSecond       float64
	Burst           int
	StrictPerSecond float64
	StrictBurst     int
}

// DefaultRateLimits are the production values (documented in docs/api-decisions.md).
var DefaultRateLimits = RateLimits{PerSecond: 50, Burst: 200, StrictPerSecond: 1, StrictBurst: 20}

// BucketStrict names the stricter bucket.
const BucketStrict = "strict"

type limiter struct {
	limits RateLimits
	mu     sync.Mutex
	ips    map[string]*visitor
	done   chan struct{}
	once   sync.Once
}

type visitor struct {
	general, strict *rate.Limiter
	seen            time.Time
}

func newLimiter(l RateLimits) *limiter {
	if l.PerSecond == 0 {
		l = DefaultRateLimits
	}
	lim := &limiter{limits: l, ips: map[string]*visitor{}, done: make(chan struct{})}
	go lim.sweep()
	return lim
}

// allow takes a token for ip from the general bucket and, for strict routes, from the strict bucket too.
// When refused it says how long to wait.
func (l *limiter) allow(ip, bucket string) (time.Duration, bool) {
	l.mu.Lock()
	v, ok := l.ips[ip]
	if !ok {
		v = &visitor{general: rate.NewLimiter(rate.Limit(l.limits.PerSecond), l.limits.Burst),
			strict: rate.NewLimiter(rate.Limit(l.limits.StrictPerSecond), l.limits.StrictBurst)}
		l.ips[ip] = v
	}
	v.seen = time.Now()
	l.mu.Unlock()
	lims := []*rate.Limiter{v.general}
	if bucket == BucketStrict {
		lims = append(lims, v.strict)
	}
	// Take from every bucket or from none: a request refused by the strict bucket does not also spend a
	// token of the general one.
	now := time.Now()
	var wait time.Duration
	res := make([]*rate.Reservation, 0, len(lims))
	for _, lim := range lims {
		r := lim.ReserveN(now, 1)
		res = append(res, r)
		if !r.OK() {
			wait = max(wait, time.Second)
		} else if d := r.DelayFrom(now); d > 0 {
			wait = max(wait, d)
		}
	}
	if wait > 0 {
		for _, r := range res {
			r.CancelAt(now)
		}
		return wait, false
	}
	return 0, true
}

// sweep forgets idle IPs so the map stays small.
func (l *limiter) sweep() {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
			l.mu.Lock()
			for ip, v := range l.ips {
				if time.Since(v.seen) > 10*time.Minute {
					delete(l.ips, ip)
				}
			}
			l.mu.Unlock()
		}
	}
}

func (l *limiter) stop() { l.once.Do(func() { close(l.done) }) }
