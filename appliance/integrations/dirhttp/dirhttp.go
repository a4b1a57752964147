// Package dirhttp is what the directory providers (autha, authb, authc) share: a JSON GET of their
// platform's API through the client they are given, with the answer's status mapped (401 and 403:
// provider.ErrCredentials) and no token, body or address in any error; and the timestamp tolerance of
// signed webhooks.
package dirhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/theappliance/appliance/appliance/integrations/provider"
)

// MaxBody caps an answer's body.
const MaxBody = 16 << 20

// Tolerance is how far a signed webhook's timestamp may be from now, either way.
const Tolerance = 5 * time.Minute

// StatusError is an answer the provider's API gave with a status other than 2xx (401 and 403 are
// provider.ErrCredentials instead). Its text has the status only.
type StatusError struct {
	Status int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("the provider's API answered HTTP %d", e.Status)
}

// GetJSON GETs u with c and decodes a 2xx answer's JSON into out. authorization, when set, is the
// Authorization header's value.
func GetJSON(ctx context.Context, c *http.Client, u, authorization string, out any) error {
	if c == nil {
		return errors.New("no HTTP client for the provider's API")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("the provider's API URL is invalid: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := c.Do(req)
	if err != nil {
		return CallError(ctx, err)
	}
	defer resp.Body.Close()
	if err := CheckStatus(resp.StatusCode); err != nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return err
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, MaxBody)).Decode(out); err != nil {
		return fmt.Errorf("the provider's API answered something other than the expected JSON: %w", err)
	}
	return nil
}

// CheckStatus maps an answer's status: nil for 2xx, provider.ErrCredentials for 401 and 403, a
// *StatusError otherwise.
func CheckStatus(status int) error {
	switch {
	case status >= 200 && status < 300:
		return nil
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return provider.ErrCredentials
	default:
		return &StatusError{Status: status}
	}
}

// CallError is the error of a call that got no answer: the context's when it ended, else the cause
// without the URL.
func CallError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("call the provider's API: %w", ctx.Err())
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("the provider's API could not be reached: %w", err)
}

// CheckTimestamp refuses a signed webhook's time further than Tolerance from now.
func CheckTimestamp(ts, now time.Time) error {
	if d := now.Sub(ts); d > Tolerance || d < -Tolerance {
		return fmt.Errorf("%w: timestamp outside the %v tolerance", provider.ErrBadSignature, Tolerance)
	}
	return nil
}
