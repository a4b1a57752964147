package appliance

import (
	"github.com/theappliance/appliance/store"
)

// projectVersion sums the versions of the tables a project's studio target is read from.
func (s *Service) projectVersion() uint64 {
	return store.Projects.Version(s.db) + store.Instances.Version(s.db)
}
