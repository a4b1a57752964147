package instances

import "time"

// Timer records how long each step of a job took (milliseconds), for the job's result.
type Timer struct {
	last time.Time
	MS   map[string]int64
}

// NewTimer starts a Timer now.
func NewTimer() *Timer { return &Timer{last: time.Now(), MS: map[string]int64{}} }

// Part records a part of the step under way, measured by its caller.
func (t *Timer) Part(name string, d time.Duration) { t.MS[name] = d.Milliseconds() }

// Done records the step that ends now (since the last one ended).
func (t *Timer) Done(step string) {
	now := time.Now()
	t.MS[step] = now.Sub(t.last).Milliseconds()
	t.last = now
}
