package httpapi

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimits are token buckets: requests per second and burst per client IP, a stricter per-IP bucket
// for the unauthenticated sign-in endpoints (CLI login start/poll and session sign-in), and a bucket per
// credential (API key or session) once the caller is authenticated.
type RateLimits struct {
	PerSecond       float64
	Burst           int
	StrictPerSecond float64
	StrictBurst     int
	// CredentialPerSecond and CredentialBurst limit each API key and session (0: no such bucket).
	CredentialPerSecond float64
	CredentialBurst     int
	// ExemptLoopback skips the general per-IP bucket for clients on loopback (the machine's own
	// programs and test suites; their credentials' buckets still apply, and so does the strict one).
	ExemptLoopback bool
}

// DefaultRateLimits are the production values (documented in docs/api-decisions.md).
var DefaultRateLimits = RateLimits{PerSecond: 100, Burst: 400, StrictPerSecond: 1, StrictBurst: 20,
	CredentialPerSecond: 500, CredentialBurst: 5000, ExemptLoopback: true}

// ParseRate reads "PER_SECOND:BURST" (e.g. "100:400").
func ParseRate(v string) (float64, int, error) {
	a, b, ok := strings.Cut(v, ":")
	r, err1 := strconv.ParseFloat(a, 64)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || r <= 0 || n < 1 {
		return 0, 0, fmt.Errorf("%q is not PER_SECOND:BURST with both above zero, e.g. 100:400", v)
	}
	return r, n, nil
}

// BucketCredential names the per-credential bucket.
const BucketCredential = "credential"

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

// allow takes a token for ip from the general bucket and, for strict routes, from the strict bucket too;
// for the credential bucket, key is the credential. When refused it says how long to wait.
func (l *limiter) allow(key, bucket string) (time.Duration, bool) {
	if bucket == BucketCredential {
		if l.limits.CredentialPerSecond <= 0 {
			return 0, true
		}
		key = "credential " + key
	}
	l.mu.Lock()
	v, ok := l.ips[key]
	if !ok {
		v = &visitor{general: rate.NewLimiter(rate.Limit(l.limits.PerSecond), l.limits.Burst),
			strict: rate.NewLimiter(rate.Limit(l.limits.StrictPerSecond), l.limits.StrictBurst)}
		if bucket == BucketCredential {
			v.general = rate.NewLimiter(rate.Limit(l.limits.CredentialPerSecond), l.limits.CredentialBurst)
		}
		l.ips[key] = v
	}
	v.seen = time.Now()
	l.mu.Unlock()
	var lims []*rate.Limiter
	if bucket == BucketCredential || !l.limits.ExemptLoopback || !isLoopback(key) {
		lims = append(lims, v.general)
	}
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

func isLoopback(ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && a.IsLoopback()
}
