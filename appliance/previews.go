package appliance

import (
	"github.com/theappliance/appliance/appliance/previews"
)

// The previews area lives in appliance/previews: the preview databases (their endpoints, the reset job, the
// clone's source, their sweep and removal with their project) and the ephemeral databases (their endpoints
// and sweep); the service holds it, built in New. Their instances are made and removed by the root's
// project jobs, which the area registers for its job types.

// EphemeralLimits bound what anonymous callers may make (Config.Ephemeral).
type EphemeralLimits = previews.EphemeralLimits

// Previews is the previews area: httpapi's preview and ephemeral routes call its methods.
func (s *Service) Previews() *previews.Service { return s.previews }

// newPreviews builds the area with the service's collaborators (New): the engine is s.eng (nil without a
// data plane).
func (s *Service) newPreviews(cfg Config, deps Deps) *previews.Service {
	ephemeral := previews.DefaultEphemeralLimits
	if cfg.Ephemeral != nil {
		ephemeral = *cfg.Ephemeral
	}
	return previews.New(previews.Config{APIURL: cfg.APIURL, PublicHost: cfg.PublicHost, Region: cfg.Region, Ephemeral: ephemeral},
		previews.Deps{DB: deps.DB, Box: deps.Box, Log: deps.Log, Clock: s.now, Engine: s.eng, Host: areaHost{s}})
}
