package appliance

import (
	"crypto/x509"

	"github.com/theappliance/appliance/appliance/studio"
)

// The studio area (the SQL console, the table editor, the console's history, the AI usage counter) lives
// in appliance/studio; the service holds it, built in New.

// Studio is the studio area: httpapi's studio routes call its methods.
func (s *Service) Studio() *studio.Service { return s.studio }

// newStudio builds the area with the service's collaborators (New).
func (s *Service) newStudio(deps Deps) *studio.Service {
	var roots *x509.CertPool
	if dp := deps.DataPlane; dp != nil {
		roots = dp.CA.Pool() // the CA that issued the instances' certificates
	}
	return studio.New(studio.Deps{DB: deps.DB, Log: deps.Log, Clock: s.now, RootCAs: roots, Host: areaHost{s}})
}
