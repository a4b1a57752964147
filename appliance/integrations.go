package appliance

import (
	"context"
	"fmt"
	"os"

	"github.com/theappliance/appliance/appliance/integrations"
	"github.com/theappliance/appliance/appliance/integrations/autha"
	"github.com/theappliance/appliance/appliance/integrations/authb"
	"github.com/theappliance/appliance/appliance/integrations/authc"
	"github.com/theappliance/appliance/appliance/integrations/deploya"
	"github.com/theappliance/appliance/appliance/integrations/deployb"
	"github.com/theappliance/appliance/appliance/integrations/edgec"
	"github.com/theappliance/appliance/appliance/integrations/provider"
)

// IntegrationProviders are the providers the integrations area drives (docs/api-decisions.md
// "Integrations"): add a provider here, one entry, and it has its endpoints, webhooks and jobs.
func IntegrationProviders() []provider.Provider {
	return []provider.Provider{deploya.New(), deployb.New(), edgec.New(), autha.New(), authb.New(), authc.New()}
}

// ParseIntegrationBaseURLs reads up --integrations-base-url (provider=URL,…).
func ParseIntegrationBaseURLs(list string) (map[string]string, error) {
	return integrations.ParseBaseURLs(list)
}

// ReadIntegrationOAuth reads up --integrations-oauth-file (the OAuth clients by provider, JSON).
func ReadIntegrationOAuth(path string) (map[string]IntegrationOAuthApp, error) {
	return integrations.ReadOAuthApps(path)
}

// IntegrationOAuthApp is the appliance's OAuth client at a provider (Config.IntegrationOAuth).
type IntegrationOAuthApp = integrations.OAuthApp

// Integrations is the integrations area (appliance/integrations).
func (s *Service) Integrations() *integrations.Service { return s.integrations }

// newIntegrations builds the area: the providers (Deps.IntegrationProviders, else IntegrationProviders),
// their base URLs and OAuth clients (the configuration), the outbound policy's client, the previews area
// for the branches' preview databases.
func (s *Service) newIntegrations(cfg Config, deps Deps) *integrations.Service {
	provs := deps.IntegrationProviders
	if provs == nil {
		provs = IntegrationProviders()
	}
	return integrations.New(integrations.Config{APIURL: cfg.APIURL, BaseURLs: cfg.IntegrationBaseURLs, OAuth: cfg.IntegrationOAuth},
		integrations.Deps{DB: deps.DB, Box: deps.Box, Log: deps.Log, Clock: s.now, Host: areaHost{s}, Previews: s.previews,
			Policy: s.policy(), Providers: provs})
}

// integrationTasks sweep the inbound events' ids kept for deduplication.
func (s *Service) integrationTasks() []periodicTask {
	return []periodicTask{{"@every 1h", "integration-events", func(ctx context.Context) {
		if _, err := s.integrations.SweepEvents(ctx); err != nil {
			s.log.Warn("integration events sweep", "err", err)
		}
	}}}
}

var _ integrations.Host = areaHost{}

// CACertPEM is the appliance CA's certificate (PEM).
func (h areaHost) CACertPEM() (string, error) {
	if h.s.cfg.CACertPath == "" {
		return "", fmt.Errorf("the appliance has no CA certificate path")
	}
	b, err := os.ReadFile(h.s.cfg.CACertPath)
	if err != nil {
		return "", fmt.Errorf("read the CA certificate: %w", err)
	}
	return string(b), nil
}
