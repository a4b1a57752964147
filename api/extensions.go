package api

// Extension is the API resource: what the project's server offers and what is enabled.
type Extension struct {
	Name             string `json:"name"`
	Description      string `json:"description"`
	DefaultVersion   string `json:"default_version"`
	InstalledVersion string `json:"installed_version" doc:"empty when not enabled"`
	AvailableVersion string `json:"available_version" doc:"the newest version the server has"`
	Enabled          bool   `json:"enabled"`
	RequiresRestart  bool   `json:"requires_restart" doc:"enabling it adds a library to shared_preload_libraries and restarts the instance"`
	Trusted          bool   `json:"trusted" doc:"PostgreSQL considers it safe for non-superusers to create"`
	UpdateAvailable  bool   `json:"update_available"`
	Category         string `json:"category" doc:"core (PostgreSQL contrib), geospatial, performance, language or other"`
}

// ExtensionList is the list response.
type ExtensionList struct {
	Extensions []Extension `json:"extensions"`
}

// ExtensionRequest is the body of POST /v1/projects/{projectID}/extensions.
type ExtensionRequest struct {
	Name string `json:"name" api:"required" doc:"an extension the server offers, e.g. postgis"`
}
