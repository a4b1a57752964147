package appliance

import "github.com/theappliance/appliance/appliance/eventlog"

// The event log lives in appliance/eventlog (its table of event types, the append in the caller's
// transaction with the webhooks' fan-out, the streams' reads, the retention sweep); the service holds it,
// built in New. The job events are the root's (jobEnded, jobs.go): the job types are.

// EventPage is a read of the log (httpapi's streams name it).
type EventPage = eventlog.Page

// Events is the event log: httpapi's event streams read it.
func (s *Service) Events() *eventlog.Log { return s.events }
