package appliance

import (
	"github.com/theappliance/appliance/appliance/programapps"
	"github.com/theappliance/appliance/store"
)

// ProgramApplicationRate is each service token's rate of program applications (Config).
type ProgramApplicationRate = programapps.Rate

// ProgramApps is the programs area's applications half (appliance/programapps): the public website's
// program applications, the service tokens it submits them with, and the operators' review.
func (s *Service) ProgramApps() *programapps.Service { return s.programApps }

// IsServiceToken reports whether a presented credential is a service token (svc_…), which
// ProgramApps().Authenticate resolves; every other credential is the identity area's.
func IsServiceToken(tok string) bool { return programapps.IsServiceToken(tok) }

// platformOrganization is the organization the platform's own events and audit events go to: the one
// made at the first start (the operator's own; see docs/api-decisions.md), "" once it is deleted.
func (s *Service) platformOrganization(tx *store.Tx) string {
	id := tx.Meta(metaBootstrapped)
	if id == "" {
		return ""
	}
	if _, err := store.Organizations.Get(tx, id); err != nil {
		return ""
	}
	return id
}
