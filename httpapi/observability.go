package httpapi

import (
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
)

func (s *Server) observabilityHistory(r *Request) (*api.HistoryResponse, error) {
	return s.svc.Observe().History(r.Context(), r.Principal, r.PathValue("projectID"), r.Int("hours"))
}

func (s *Server) topQueries(r *Request) (*api.TopQueriesResponse, error) {
	return s.svc.Observe().TopQueries(r.Context(), r.Principal, r.PathValue("projectID"), r.Int("hours"))
}

func (s *Server) queryDetail(r *Request) (*api.QueryDetailResponse, error) {
	return s.svc.Observe().QueryDetail(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("queryHash"), r.Int("hours"))
}

func (s *Server) indexAdvice(r *Request) (*api.AdvisorResponse, error) {
	return s.svc.Observe().IndexAdvice(r.Context(), r.Principal, r.PathValue("projectID"), r.Int("min_filter"), r.Int("min_selectivity"), r.Bool("refresh"))
}

// logsQuery is the logs routes' query.
func logsQuery(r *Request, stream bool) appliance.LogsQuery {
	return appliance.LogsQuery{Hours: r.Int("hours"), Cursor: r.Str("cursor"), Severity: r.Str("severity"), Limit: r.Int("limit"), Stream: stream,
		Q: r.Str("q"), From: r.Str("from"), To: r.Str("to"), User: r.Str("user"), Database: r.Str("database"), SQLState: r.Str("sqlstate")}
}

// downloadLogs streams the entries of a range as newline-delimited JSON, as an attachment. A bad query
// is answered with its JSON error before anything is written; an error midway cuts the download short.
func (s *Server) downloadLogs(r *Request) error {
	id := r.PathValue("projectID")
	started := false
	err := s.svc.Observe().DownloadLogs(r.Context(), r.Principal, id, logsQuery(r, false), func() io.Writer {
		started = true
		h := r.W.Header()
		h.Set("Content-Type", "application/x-ndjson")
		name := "logs-" + id + "-" + time.Now().UTC().Format("20060102T150405Z") + ".ndjson"
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
		h.Set("Cache-Control", "private, no-store")
		r.W.WriteHeader(http.StatusOK)
		return r.W
	})
	if err != nil && started {
		s.log.Warn("log download cut short", "project", id, "err", err)
		return nil
	}
	return err
}

func (s *Server) readLogs(r *Request) (*api.LogsResponse, error) {
	return s.svc.Observe().ReadLogs(r.Context(), r.Principal, r.PathValue("projectID"), logsQuery(r, false))
}

// streamLogs is the live tail: the entries the query selects (the newest of the window, or those after
// the cursor; Last-Event-ID wins over cursor, as a reconnecting EventSource sends it), then every new
// one, each with its cursor as the event's id.
func (s *Server) streamLogs(r *Request) error {
	id := r.PathValue("projectID")
	q := logsQuery(r, true)
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		q.Cursor = last
	}
	return s.serveSSE(r, "the logs of project "+id, r.Bool("follow"), func() ([]sseFrame, bool, error) {
		res, err := s.svc.Observe().ReadLogs(r.Context(), r.Principal, id, q)
		if err != nil {
			return nil, false, err
		}
		frames := make([]sseFrame, 0, len(res.Logs.Entries))
		for _, e := range res.Logs.Entries {
			data, err := json.Marshal(e)
			if err != nil {
				return nil, false, err
			}
			frames = append(frames, sseFrame{ID: e.Cursor, Event: "log", Data: data})
		}
		more := q.Cursor != "" && len(res.Logs.Entries) == q.Limit
		q.Cursor = res.Logs.NextCursor
		return frames, more, nil
	})
}
