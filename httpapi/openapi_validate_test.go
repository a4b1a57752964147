package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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
		closeResponseObjects(spec)
		r.router, r.err = gorillamux.NewRouter(spec)
	})
	return r.router, r.err
}

func init() {
	// The formats the document uses beyond those kin-openapi checks by default.
	openapi3.DefineStringFormatValidator("uri", openapi3.NewCallbackValidator(func(s string) error {
		u, err := url.Parse(s)
		if err != nil || !u.IsAbs() || (u.Host == "" && u.Opaque == "") {
			return fmt.Errorf("not an absolute URI: %q", s)
		}
		return nil
	}))
	openapi3.DefineStringFormatValidator("int64", openapi3.NewCallbackValidator(func(s string) error {
		_, err := strconv.ParseInt(s, 10, 64)
		return err
	}))
	openapi3.DefineStringFormatValidator("uint64", openapi3.NewCallbackValidator(func(s string) error {
		_, err := strconv.ParseUint(s, 10, 64)
		return err
	}))
}

// closeResponseObjects makes every response object of the loaded document refuse the properties it does
// not declare (additionalProperties: false where the document leaves it open), so that a field the
// server sends without documenting it fails the tests. The served document stays open: a client must
// accept fields added later.
func closeResponseObjects(spec *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(ref *openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil && len(s.AllOf) == 0 {
			s.AdditionalProperties = openapi3.AdditionalProperties{Has: openapi3.Ptr(false)}
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		walk(s.AdditionalProperties.Schema)
		for _, list := range [][]*openapi3.SchemaRef{s.OneOf, s.AnyOf, s.AllOf} {
			for _, x := range list {
				walk(x)
			}
		}
	}
	for _, item := range spec.Paths.Map() {
		for _, op := range item.Operations() {
			for _, resp := range op.Responses.Map() {
				if resp.Value == nil {
					continue
				}
				for _, media := range resp.Value.Content {
					walk(media.Schema)
				}
			}
		}
	}
}

// validating wraps the test server's handler: every response it sends, to b.do or to any other client
// of the test, is checked against the served document once the handler returns (checkAgainstOpenAPI).
// JSON bodies are kept for the check; streams (text/event-stream) are checked by status and headers.
func (b *bundle) validating(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tw := &teeWriter{ResponseWriter: w}
		h.ServeHTTP(tw, r)
		if tw.status == 0 {
			tw.status = http.StatusOK
		}
		body := tw.body.Bytes()
		if strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
			body = nil // the document gives a stream's events no schema
		} else if tw.over {
			return
		}
		checkAgainstOpenAPI(b.t, b, r, &response{status: tw.status, header: w.Header().Clone(), body: body})
	})
}

// teeWriter passes a response through and keeps a copy of its status and (up to 16 MiB of) its body; a
// larger body (an export download) is passed through unchecked.
type teeWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
	over   bool
}

func (w *teeWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *teeWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if !w.over {
		if w.body.Len()+len(p) > 16<<20 {
			w.over = true
			w.body = bytes.Buffer{}
		} else {
			w.body.Write(p)
		}
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (flushes, deadlines).
func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush sends what is buffered (event streams flush after each event).
func (w *teeWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
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
	if err := openapi3filter.ValidateResponse(context.WithoutCancel(req.Context()), in); err != nil {
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
