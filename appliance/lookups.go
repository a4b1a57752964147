package appliance

import (
	"github.com/theappliance/appliance/store"
)

// authVersion sums the versions of the tables an API key's principal is read from (the key, its creator's
// user record with the memberships and roles, the organizations): it changes whenever one of them does.
func (s *Service) authVersion() uint64 {
	return store.APIKeys.Version(s.db) + store.Users.Version(s.db) + store.Organizations.Version(s.db)
}

// projectVersion sums the versions of the tables a project's studio target is read from.
func (s *Service) projectVersion() uint64 {
	return store.Projects.Version(s.db) + store.Instances.Version(s.db)
}
