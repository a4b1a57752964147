// Package webhook sends signed HTTP deliveries the Standard Webhooks way
// (https://www.standardwebhooks.com): headers webhook-id, webhook-timestamp and webhook-signature
// ("v1,<base64 HMAC-SHA256 of id.timestamp.body>", one per secret, space-separated), a JSON body.
//
// Every connection goes through the dial function it is given (the appliance's outbound policy), never
// through a proxy from the environment; redirects are not followed; only a small part of a response body
// is read; each attempt has a deadline.
//
// The package is also the webhooks area of the API (service.go: Service, built by the root's New and
// reached through its Host; endpoints.go: the endpoints; deliveries.go: the deliveries queued for each
// event, the worker's records and the recorder of its attempts).
package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// SecretPrefix starts every signing secret; the rest is the base64 of the key.
const SecretPrefix = "whsec_"

// NewSecret returns a new signing secret: whsec_ and the base64 of 24 random bytes.
func NewSecret() string {
	b := make([]byte, 24)
	rand.Read(b)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// Sign returns the v1 signature of a message for secret.
func Sign(secret, msgID string, ts time.Time, body []byte) (string, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil {
		return "", fmt.Errorf("webhook secret is not whsec_<base64>: %w", err)
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.", msgID, ts.Unix())
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}

// CheckURL accepts an absolute http or https URL with a host, no credentials and no fragment.
func CheckURL(raw string) (*url.URL, error) {
	if len(raw) > 2048 {
		return nil, errors.New("url must be at most 2048 characters")
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Opaque != "" {
		return nil, errors.New("url must be an absolute http:// or https:// URL with a host")
	}
	if u.User != nil {
		return nil, errors.New("url must not carry credentials (the signature authenticates deliveries)")
	}
	for _, r := range u.Host {
		if r >= 0x80 {
			return nil, errors.New("url host must be ASCII (write an internationalized name in its xn-- form)")
		}
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return nil, errors.New("url must not have a fragment")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, errors.New("url has an invalid port")
		}
	}
	return u, nil
}

// Port is the URL's port, or the scheme's default.
func Port(u *url.URL) int {
	if n, err := strconv.Atoi(u.Port()); err == nil {
		return n
	}
	if u.Scheme == "https" {
		return 443
	}
	return 80
}

// Message is one delivery attempt's content.
type Message struct {
	URL     string
	ID      string    // webhook-id: the same on every attempt of one delivery
	Time    time.Time // webhook-timestamp: this attempt's time
	Body    []byte
	Secrets []string // every secret signs (the current one, and the previous one during a rotation's overlap)
}

// Result is what an attempt met.
type Result struct {
	Status     int           // the HTTP status; 0 when no response came
	RetryAfter time.Duration // the response's Retry-After (429 and 503), 0 when absent
	Err        error         // transport error (the caller turns it into a tenant-safe text)
	Duration   time.Duration
}

// OK reports a 2xx answer.
func (r Result) OK() bool { return r.Err == nil && r.Status >= 200 && r.Status < 300 }

// retryAfter reads Retry-After: delay seconds or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, 7*24*3600)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Verify checks a received delivery the way a receiver should: the timestamp within tolerance of now,
// and one of the webhook-signature's v1 signatures made with secret.
func Verify(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id, tsRaw, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || tsRaw == "" || sigs == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	sec, err := strconv.ParseInt(tsRaw, 10, 64)
	if err != nil {
		return errors.New("webhook-timestamp is not Unix seconds")
	}
	ts := time.Unix(sec, 0)
	if d := now.Sub(ts); d > tolerance || d < -tolerance {
		return fmt.Errorf("webhook-timestamp is %s away from now", d.Round(time.Second))
	}
	want, err := Sign(secret, id, ts, body)
	if err != nil {
		return err
	}
	for _, s := range strings.Fields(sigs) {
		if hmac.Equal([]byte(s), []byte(want)) {
			return nil
		}
	}
	return errors.New("no signature matches the secret")
}
