// Package keyrate is a token bucket per key: the import preflights' per project (appliance/migrate), the
// ephemeral databases' per client address (appliance/previews); and the key of a client address
// (AddressKey), which the API's rate buckets use too.
package keyrate

import (
	"net/netip"
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

// AddressKey is the key of a client address in per-address limits (the API's rate buckets, ephemeral
// databases): an IPv6 address counts by its /64, the block one host or site usually holds (a fresh address
// per request must not mean a fresh bucket); IPv4 (also mapped into IPv6) and loopback addresses count one
// each.
func AddressKey(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	a = a.Unmap().WithZone("")
	if a.Is4() || a.IsLoopback() {
		return a.String()
	}
	return netip.PrefixFrom(a, 64).Masked().String()
}

// Every is the interval of one token.
func (r *Limiter) Every() time.Duration { return r.every }

// Burst is the most tokens a bucket holds.
func (r *Limiter) Burst() int { return r.burst }
