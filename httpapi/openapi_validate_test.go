package httpapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// openapiRouters caches a router per served document: every server of the test binary serves the same
// document (unless a test adds routes), so it is loaded and validated once per process.
var openapiRouters struct {
	mu sync.Mutex
	m  map[string]*openapiRouter
}

type openapiRouter struct {
	once   sync.Once
	router routers.Router
	err    error
}

// routerFor loads doc (the served /v1/openapi.json), validates it and builds a router over it.
func routerFor(doc []byte) (routers.Router, error) {
	openapiRouters.mu.Lock()
	if openapiRouters.m == nil {
		openapiRouters.m = map[string]*openapiRouter{}
	}
	r := openapiRouters.m[string(doc)]
	if r == nil {
		r = &openapiRouter{}
		openapiRouters.m[string(doc)] = r
	}
	openapiRouters.mu.Unlock()
	r.once.Do(func() {
		loader := openapi3.NewLoader()
		spec, err := loader.LoadFromData(doc)
		if err != nil {
			r.err = err
			return
		}
		if err := spec.Validate(context.Background()); err != nil {
			r.err = err
			return
		}
		spec.Servers = nil // match whatever host and port httptest chose
		r.router, r.err = gorillamux.NewRouter(spec)
	})
	return r.router, r.err
}

// checkAgainstOpenAPI validates a response against the served OpenAPI document: its status must be
// documented (or fall under "default"), its documented headers present and valid, and its JSON body must
// match the schema. Requests the document has no operation for (unknown paths, other methods) are not
// checked: the server answers them itself with 404 or 405.
func checkAgainstOpenAPI(t testing.TB, b *bundle, req *http.Request, resp *response) {
	t.Helper()
	router, err := routerFor(b.api.openapi)
	if err != nil {
		t.Fatalf("openapi: the served document does not load: %v", err)
	}
	route, pathParams, err := router.FindRoute(req)
	if errors.Is(err, routers.ErrPathNotFound) || errors.Is(err, routers.ErrMethodNotAllowed) {
		return
	}
	if err != nil {
		t.Errorf("openapi: %s %s: finding the route: %v", req.Method, req.URL.Path, err)
		return
	}
	opts := &openapi3filter.Options{
		ExcludeRequestBody:    true, // the request was already sent; only the response is checked here
		IncludeResponseStatus: true,
		MultiError:            true,
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
	}
	// The request is described without its body, which was consumed when it was sent.
	described := req.Clone(req.Context())
	described.Body = http.NoBody
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: described, PathParams: pathParams, Route: route, Options: opts,
		},
		Status:  resp.status,
		Header:  resp.header,
		Body:    io.NopCloser(bytes.NewReader(resp.body)),
		Options: opts,
	}
	if err := openapi3filter.ValidateResponse(req.Context(), in); err != nil {
		t.Errorf("openapi: %s %s answered %d, which does not match the document (operation %s):\n%v\nbody: %s",
			req.Method, req.URL.Path, resp.status, route.Operation.OperationID, err, truncate(resp.body, 2000))
	}
}

func truncate(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	return append(b[:n:n], "..."...)
}
