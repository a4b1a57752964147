// Package keyrate is a token bucket per key: the import preflights' per project (appliance/migrate), the
// ephemeral databases' per client address (the root).
package keyrate

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter is a token bucket per key (New gives its rate).
type Limiter struct {
	mu      sync.Mutex
	every   time.Duration
	burst   int
	buckets map[string]*rate.Limiter
}

// New is a limiter of one token every every, burst at most.
func New(every time.Duration, burst int) *Limiter {
	return &Limiter{every: every, burst: burst, buckets: map[string]*rate.Limiter{}}
}

// Wait takes a token of key's bucket and returns 0, or, when the bucket is empty, takes nothing and
// returns how long until it holds a token again (what a 429's Retry-After says).
func (r *Limiter) Wait(key string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.buckets[key]
	if l == nil {
		l = rate.NewLimiter(rate.Every(r.every), r.burst)
		r.buckets[key] = l
	}
	res := l.Reserve()
	if d := res.Delay(); d > 0 {
		res.Cancel()
		return d
	}
	return 0
}
