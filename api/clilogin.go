package api

import "time"

// CLILoginStartRequest is the (optional) body of POST /v1/cli/login/sessions.
type CLILoginStartRequest struct {
	DeviceName       string   `json:"device_name" schema:"maxLength=100" doc:"name of the device asking, shown to the approving user (up to 100 characters)"`
	KeyName          string   `json:"key_name" schema:"maxLength=100" doc:"name of the key to mint (default: \"CLI on <device_name>\")"`
	Scopes           []string `json:"scopes,omitempty" doc:"scopes requested; default: every scope the approving user holds"`
	KeyExpiresInDays int64    `json:"key_expires_in_days" schema:"minimum=0,maximum=3650" doc:"1 to 3650; 0 or absent: 90"`
}

// CLILoginStart is the start result.
type CLILoginStart struct {
	SessionID string    `json:"session_id"`
	PollToken string    `json:"poll_token"`
	State     string    `json:"state"`
	ExpiresAt time.Time `json:"expires_at"`
	UserCode  string    `json:"user_code" schema:"pattern=^[A-Z]{4}-[A-Z]{4}$,example=BCDF-GHJK" doc:"the code the CLI shows; the approval page shows it too, to compare before approving"`
}

// CLILoginResult is the poll, authorize and refuse result: state is pending, authorized, completed,
// refused (a signed-in user refused it: it can no longer be approved) or expired.
type CLILoginResult struct {
	SessionID        string     `json:"session_id"`
	State            string     `json:"state"`
	ExpiresAt        time.Time  `json:"expires_at"`
	AuthorizedAt     *time.Time `json:"authorized_at"`
	OrganizationID   string     `json:"organization_id"`
	OrganizationName string     `json:"organization_name"`
	OrganizationSlug string     `json:"organization_slug"`
	PlaintextAPIKey  string     `json:"plaintext_api_key" doc:"the minted key; present exactly once, in the first poll after authorization, otherwise empty"`
}

// CLILoginDetails is what the approving user sees before authorizing.
type CLILoginDetails struct {
	SessionID    string     `json:"session_id"`
	State        string     `json:"state"`
	ExpiresAt    time.Time  `json:"expires_at"`
	DeviceName   string     `json:"device_name"`
	KeyName      string     `json:"key_name"`
	KeyExpiresAt *time.Time `json:"key_expires_at"`
	Scopes       []string   `json:"scopes"`
	Source       string     `json:"source"`
	UserCode     string     `json:"user_code" doc:"the code the CLI printed: approve only when the two match"`
}
