package httpapi

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance/appliancetest"
)

// TestMetricsDocumentedAsServed: the OpenAPI document's text for GET /metrics says who is answered as the
// server does it: with an operator listener (up --metrics-listen) and no token, a loopback client of the
// API's listener is refused, so the text must not promise /metrics to loopback clients whenever no token
// is set, and must name the operator listener.
func TestMetricsDocumentedAsServed(t *testing.T) {
	t.Parallel()
	e := appliancetest.New(t, appliancetest.Options{})
	api := New(e.Svc, Options{Log: slog.New(slog.DiscardHandler), OperatorListener: true})
	t.Cleanup(func() { api.Close() })
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.RemoteAddr = "127.0.0.1:4000"
	w := httptest.NewRecorder()
	api.ServeHTTP(w, req)
	if w.Code != http.StatusForbidden {
		t.Fatalf("a loopback client of the API's listener beside an operator listener: %d %s", w.Code, w.Body)
	}
	var text string
	for _, rt := range api.routes {
		if rt.Method == http.MethodGet && rt.Path == "/metrics" {
			text = rt.Summary
		}
	}
	if !strings.Contains(text, "--metrics-listen") || !strings.Contains(text, "--metrics-token") ||
		strings.Contains(text, "otherwise loopback clients only") {
		t.Fatalf("GET /metrics is documented as %q", text)
	}
}
