package deployb

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/theappliance/appliance/appliance/integrations/provider"
)

// SignatureHeader carries a deploy notification's JWS.
const SignatureHeader = "X-Webhook-Signature"

// Issuer is the JWS's iss claim.
const Issuer = "netlify"

// The JWS is HS256 over {iss: "netlify", sha256: hex SHA-256 of the body}, keyed with the "JWS secret
// token" set on the notification. Netlify's claims hold no time, so there is no tolerance to check:
// replays are deduplicated by the event id (the deploy's id and state). Were exp or nbf there, they would
// be checked against now with the contract's 5 minutes of leeway.
//
// golang-jwt, not go-jose: go-jose refuses HS256 keys shorter than 32 bytes, and Netlify takes any
// secret a person types.
func parser(now time.Time) *jwt.Parser {
	return jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithIssuer(Issuer),
		jwt.WithTimeFunc(func() time.Time { return now }), jwt.WithLeeway(5*time.Minute))
}

type claims struct {
	jwt.RegisteredClaims
	SHA256 string `json:"sha256"`
}

// VerifyWebhook verifies a deploy notification's signature and returns the deploy's id and state as
// the event id (a signed body that is no deploy: its SHA-256).
func (Provider) VerifyWebhook(env provider.Env, h http.Header, body []byte, now time.Time) (string, error) {
	secret := env.Credentials.WebhookSecret
	sig := strings.TrimSpace(h.Get(SignatureHeader))
	if secret == "" || sig == "" {
		return "", provider.ErrBadSignature
	}
	var cl claims
	tok, err := parser(now).ParseWithClaims(sig, &cl, func(*jwt.Token) (any, error) { return []byte(secret), nil })
	if err != nil || !tok.Valid {
		return "", provider.ErrBadSignature
	}
	sum := sha256.Sum256(body)
	want := hex.EncodeToString(sum[:])
	if subtle.ConstantTimeCompare([]byte(strings.ToLower(cl.SHA256)), []byte(want)) != 1 {
		return "", provider.ErrBadSignature
	}
	if d, err := parseDeploy(body); err == nil && d.ID != "" && d.State != "" {
		return d.ID + ":" + d.State, nil
	}
	// Signed, but not a deploy: its hash deduplicates it, and DeployEvent ignores it.
	return "sha256:" + want, nil
}

// deploy is the part of Netlify's deploy object a notification's body is that we read.
type deploy struct {
	ID       string `json:"id"`
	SiteID   string `json:"site_id"`
	State    string `json:"state"`
	Branch   string `json:"branch"`
	Context  string `json:"context"`
	ReviewID *int64 `json:"review_id"`
}

func parseDeploy(body []byte) (deploy, error) {
	var d deploy
	if err := json.Unmarshal(body, &d); err != nil {
		return deploy{}, fmt.Errorf("deploy_b: the notification is not a deploy: %w", err)
	}
	return d, nil
}

// DeployEvent reads a notification's deploy: production when its context is production; a deploy
// preview (a pull request) or a branch deploy is its branch's. Every deploy notification (started,
// succeeded, failed…) is an event: the body does not say which notification it is, and a preview's
// database is wanted from the first. Closed is never set: Netlify sends no branch-deleted or
// pull-request-closed notification (a preview database goes by its TTL or DELETE).
func (Provider) DeployEvent(body []byte) (provider.DeployEvent, error) {
	d, err := parseDeploy(body)
	if err != nil {
		return provider.DeployEvent{}, err
	}
	switch d.Context {
	case "production", "deploy-preview", "branch-deploy":
	default:
		return provider.DeployEvent{}, provider.ErrIgnored
	}
	if d.ID == "" || d.Branch == "" {
		return provider.DeployEvent{}, provider.ErrIgnored
	}
	return provider.DeployEvent{ID: d.ID + ":" + d.State, Branch: d.Branch, Production: d.Context == "production"}, nil
}
