package webhook

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// TestSignMatchesStandardWebhooks: our signature is the reference library's, and Verify accepts what the
// library signs and refuses a changed body, another secret or an old timestamp.
func TestSignMatchesStandardWebhooks(t *testing.T) {
	secret := NewSecret()
	ref, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	body := []byte(`{"type":"job.completed","timestamp":"2026-11-25T00:00:00Z","data":{}}`)
	ours, err := Sign(secret, "msg_1", now, body)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := ref.Sign("msg_1", now, body)
	if err != nil || ours != theirs {
		t.Fatalf("ours %q, the library's %q (%v)", ours, theirs, err)
	}
	h := http.Header{}
	h.Set("webhook-id", "msg_1")
	h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	h.Set("webhook-signature", "v1,bogus "+theirs)
	if err := Verify(secret, h, body, now, 5*time.Minute); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if err := ref.Verify(body, h); err != nil {
		t.Fatalf("the library refuses the same headers: %v", err)
	}
	for name, c := range map[string]struct {
		secret string
		body   string
		now    time.Time
	}{
		"changed body":  {secret, `{}`, now},
		"other secret":  {NewSecret(), string(body), now},
		"old timestamp": {secret, string(body), now.Add(10 * time.Minute)},
	} {
		if err := Verify(c.secret, h, []byte(c.body), c.now, 5*time.Minute); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}
