package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/theappliance/appliance/appliance"
)

// Event streams poll the log this often, and send a heartbeat comment at least every Heartbeat.
const (
	eventPoll        = 250 * time.Millisecond
	DefaultHeartbeat = 15 * time.Second
	eventBatch       = 100
	eventWriteBudget = 10 * time.Second // a client that takes longer to take one write is disconnected
	// streamAuthCheck is how often an idle stream authenticates its credential again (and a stream with
	// something to send always does, first): a stream ends within about this long of losing access.
	streamAuthCheck = time.Second
)

// projectEvents streams a project's events.
func (s *Server) projectEvents(r *Request) error {
	id := r.PathValue("projectID")
	return s.streamEvents(r, "project "+id, func(after uint64) (*appliance.EventPage, error) {
		return s.svc.Events().ProjectEvents(r.Context(), r.Principal, id, after, eventBatch)
	})
}

// organizationEvents streams the events of an organization's projects (and its own, with
// organizations:read).
func (s *Server) organizationEvents(r *Request) error {
	id := r.PathValue("orgID")
	return s.streamEvents(r, "organization "+id, func(after uint64) (*appliance.EventPage, error) {
		return s.svc.Events().OrganizationEvents(r.Context(), r.Principal, id, after, eventBatch)
	})
}

// streamEvents streams events as text/event-stream: every event after the position the client names
// (Last-Event-ID, or last_event_id for browsers' EventSource reconnects made by hand), then live ones.
// Each stream reads the durable log on its own, so a slow client holds nothing but its own connection: a
// write it does not take within eventWriteBudget ends its stream, and it resumes by id.
func (s *Server) streamEvents(r *Request, what string, read func(after uint64) (*appliance.EventPage, error)) error {
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = r.Str("last_event_id")
	}
	var after uint64
	switch {
	case last != "":
		n, err := strconv.ParseUint(last, 10, 64)
		if err != nil {
			return appliance.Invalid("Last-Event-ID must be an event position (a whole number)")
		}
		after = n
	case r.Bool("skip_backlog"):
		pos, err := s.svc.Events().Position()
		if err != nil {
			return appliance.Internal(err, "read the event log's position")
		}
		after = pos
	}
	return s.serveSSE(r, what, r.Bool("follow"), func() ([]sseFrame, bool, error) {
		page, err := read(after)
		if err != nil {
			return nil, false, err
		}
		frames := make([]sseFrame, len(page.Events))
		for i, e := range page.Events {
			frames[i] = sseFrame{ID: strconv.FormatUint(e.Seq, 10), Event: e.Type, Data: e.Data}
		}
		after = page.Last
		return frames, page.Full, nil
	})
}

// sseFrame is one event of a text/event-stream.
type sseFrame struct {
	ID, Event string
	Data      []byte // one line of JSON
}

// serveSSE answers with text/event-stream, the framing every stream of the API shares (the project and
// organization events, the log tail): the frames next returns, read again at once while it reports more
// waiting, then every eventPoll while follow, with a heartbeat comment at least every s.heartbeat. The
// first call of next happens before the answer starts, so its error (a 404, a 403, a bad cursor) is a JSON
// error; a later error ends the stream (the resource went away or the caller lost access).
//
// The stream holds its credential's access, not a copy of it: before it writes frames it has read, and at
// least every streamAuthCheck while idle, it authenticates the credential again (stillAllowed); when that
// fails (revoked or expired key, ended or expired session, the user removed, the rights changed) it ends
// with a comment saying why, so nothing read after access was lost is sent. A client that does not take a
// write within s.writeBudget is disconnected; the deadline is cleared after each write, so a quiet stream
// is not (HTTP/2 resets a stream whose deadline passes even with no write under way). The server's Close
// ends every stream.
func (s *Server) serveSSE(r *Request, what string, follow bool, next func() ([]sseFrame, bool, error)) error {
	frames, more, err := next()
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
		_ = rc.SetWriteDeadline(time.Now().Add(s.writeBudget))
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		if rc.Flush() != nil {
			return false
		}
		_ = rc.SetWriteDeadline(time.Time{})
		return true
	}
	if !write(": stream of %s\n\n", what) {
		return nil
	}
	checked := time.Now() // the request was authorized just before
	poll := time.NewTicker(eventPoll)
	defer poll.Stop()
	beat := time.NewTicker(s.heartbeat)
	defer beat.Stop()
	for {
		if len(frames) > 0 || time.Since(checked) >= streamAuthCheck {
			if err := s.stillAllowed(r); err != nil {
				if appliance.KindOf(err) == appliance.KindInternal {
					s.log.Error("stream: authenticate again", "path", r.URL.Path, "err", err)
				}
				write(": the stream ends: %s\n\n", publicMessage(err))
				return nil
			}
			checked = time.Now()
		}
		for _, f := range frames {
			if !write("id: %s\nevent: %s\ndata: %s\n\n", f.ID, f.Event, f.Data) {
				return nil
			}
		}
		frames = nil
		if !more {
			if !follow {
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
				continue
			case <-poll.C:
			}
		}
		if frames, more, err = next(); err != nil {
			return nil
		}
	}
}
