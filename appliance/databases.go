package appliance

import "github.com/theappliance/appliance/appliance/databases"

// The databases and roles area of a project's server lives in appliance/databases; the service holds it,
// built in New.

// Databases is the databases and roles area: httpapi's databases and roles routes call its methods.
func (s *Service) Databases() *databases.Service { return s.databases }
