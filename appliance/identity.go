package appliance

import (
	"github.com/theappliance/appliance/appliance/identity"
	"github.com/theappliance/appliance/store"
)

// Identity is the identity area (appliance/identity): sign-in, sessions and the authentication of every
// request, members and invitations, the CLI login, API keys, the organizations' profiles.
func (s *Service) Identity() *identity.Service { return s.identity }

// newIdentity builds the area with the service's collaborators (New).
func (s *Service) newIdentity(cfg Config, deps Deps) *identity.Service {
	return identity.New(identity.Config{KeyPrefix: cfg.KeyPrefix, PasswordCost: cfg.PasswordCost},
		identity.Deps{DB: deps.DB, Box: deps.Box, Clock: s.now, Host: areaHost{s}})
}

// Organization is the API resource (the stored record has exactly the spec's fields).
type Organization = store.Organization
