package httpapi

import (
	"fmt"

	"github.com/theappliance/appliance/appliance"
	"net/http"
	"strconv"
	"time"
)

// Event streams poll the log this often, and send a heartbeat comment at least every Heartbeat.
const (
	eventPoll        = 250 * time.Millisecond
	DefaultHeartbeat = 15 * time.Second
	eventBatch       = 100
	eventWriteBudget = 10 * time.Second // a client that takes longer to take one write is disconnected
)

// projectEvents streams a project's events (text/event-stream): every event after the position the
// client names (Last-Event-ID, or last_event_id for browsers' EventSource reconnects made by hand), then
// live ones. Each stream reads the durable log on its own, so a slow client holds nothing but its own
// connection: a write it does not take within eventWriteBudget ends its stream, and it resumes by id.
func (s *Server) projectEvents(r *Request) error {
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = r.Str("last_event_id")
	}
	var after uint64
	if last != "" {
		n, err := strconv.ParseUint(last, 10, 64)
		if err != nil {
			return appliance.Invalid("Last-Event-ID must be an event position (a whole number)")
		}
		after = n
	}
	projectID := r.PathValue("projectID")
	// The first read checks the project (404/403 as JSON before the stream starts).
	evs, err := s.svc.ProjectEvents(r.Context(), r.Principal, projectID, after, eventBatch)
	if err != nil {
		return err
	}
	w := r.W
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	write := func(format string, args ...any) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(eventWriteBudget))
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write(": stream of project %s\n\n", projectID) {
		return nil
	}
	poll := time.NewTicker(eventPoll)
	defer poll.Stop()
	beat := time.NewTicker(s.heartbeat)
	defer beat.Stop()
	for {
		for _, e := range evs {
			if !write("id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, e.Data) {
				return nil
			}
			after = e.Seq
		}
		if len(evs) == eventBatch { // more are waiting
			if evs, err = s.svc.ProjectEvents(r.Context(), r.Principal, projectID, after, eventBatch); err != nil {
				return nil
			}
			continue
		}
		if !r.Bool("follow") {
			return nil
		}
		select {
		case <-r.Context().Done():
			return nil
		case <-s.done:
			return nil // the server is shutting down: the client reconnects with its last id
		case <-beat.C:
			if !write(": heartbeat\n\n") {
				return nil
			}
		case <-poll.C:
		}
		if evs, err = s.svc.ProjectEvents(r.Context(), r.Principal, projectID, after, eventBatch); err != nil {
			return nil // the project went away or the caller lost access: the stream ends
		}
	}
}
