package studio

import (
	"context"
	"encoding/json"
	"time"

	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/batch"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/pglog"
	"github.com/theappliance/appliance/store"
)

// The studio's log writes the console's history entries and the studio's audit events, many per
// transaction (a batch.Writer lingering 5 ms after an entry for others to share its commit: a commit's
// fdatasync costs about as much CPU as tens of entries' encoding). A run that may have changed data waits
// until its entries are written, before its answer (the writer does not linger for it), so a crash cannot
// lose the record of a change the client was told of; only a provably inert one (Inert) hands its entries
// over without waiting. A reader of either flushes it first (docs/api-decisions.md "Studio: answer caps,
// masked history, durable records").

type logEntry struct {
	history *store.SQLHistoryEntry
	audit   *store.AuditEvent
}

// record hands over a history entry (may be nil) and an audit event of action; with durable it waits
// until they are committed.
func (s *Service) record(p *authz.Principal, h *store.SQLHistoryEntry, action string, prj *store.Project, metadata map[string]any, durable bool) error {
	kind, id := p.Actor()
	md, _ := json.Marshal(metadata)
	e := logEntry{history: h, audit: &store.AuditEvent{ID: ids.New("aud"), Action: action, ActorKind: kind, ActorID: id,
		OrganizationID: prj.OrganizationID, ProjectID: prj.ID, Metadata: md, CreatedAt: s.now()}}
	if !durable {
		s.logWriter().Add(e)
		return nil
	}
	if err := s.logWriter().Write(e); err != nil {
		return apperr.Internal(err, "record the studio's audit event")
	}
	return nil
}

func (s *Service) logWriter() *batch.Writer[logEntry] {
	s.writerOnce.Do(func() {
		s.writer = batch.New(s.db, nil, 512, logLinger, 4096, s.log, "the studio's history and audit entries",
			func(tx *store.Tx, e logEntry) error {
				if e.history != nil {
					if err := store.SQLHistory.Put(tx, e.history); err != nil {
						return err
					}
				}
				return store.AuditEvents.Put(tx, e.audit)
			})
		go s.writer.Run()
	})
	return s.writer
}

// FlushLog waits until every history entry and audit event the studio queued before it is written (the
// readers of the history and of the audit log call it first).
func (s *Service) FlushLog(ctx context.Context) error { return s.logWriter().Flush(ctx) }

// logLinger is how long the writer waits after an entry for more to share its commit.
const logLinger = 5 * time.Millisecond

// PruneHistory deletes history entries older than HistoryRetention and, per project, all but the newest
// HistoryKeep, and masks the passwords of those an earlier version stored in clear (the sweep).
func (s *Service) PruneHistory(ctx context.Context) (int, error) {
	if err := s.FlushLog(ctx); err != nil {
		return 0, err
	}
	deleted := 0
	cutoff := s.now().Add(-HistoryRetention)
	err := s.db.Update(func(tx *store.Tx) error {
		deleted = 0 // a run again starts over
		all, err := store.SQLHistory.All(tx, nil)
		if err != nil {
			return err
		}
		perProject := map[string]int{}
		for i := len(all) - 1; i >= 0; i-- { // newest first
			h := all[i]
			perProject[h.ProjectID]++
			if perProject[h.ProjectID] > HistoryKeep || h.CreatedAt.Before(cutoff) {
				if err := store.SQLHistory.Delete(tx, h.ID); err != nil {
					return err
				}
				deleted++
			} else if maskHistory(h) { // stored in clear by an earlier version
				if err := store.SQLHistory.Put(tx, h); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return deleted, err
}

// maskHistory masks the passwords of an entry's text and error (pglog, as RunSQL stores them) and reports
// whether that changed it.
func maskHistory(h *store.SQLHistoryEntry) bool {
	q, e := pglog.RedactStatement(h.Query, h.Error)
	if q == h.Query && e == h.Error {
		return false
	}
	h.Query, h.Error = q, e
	return true
}
