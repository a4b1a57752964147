// Package httpapi is the HTTP face of the appliance: the route table, authentication, scope and project
// checks, rate limits, JSON errors and the OpenAPI document generated from the table.
package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/cluster/forward"
	"github.com/theappliance/appliance/appliance/keyrate"
	"github.com/theappliance/appliance/httpapi/connlimit"

	"github.com/theappliance/appliance/scheduler/lane"
)

// Options tune the server.
type Options struct {
	Limits RateLimits
	Log    *slog.Logger
	// Extra routes appended to the table (test builds register diagnostic routes here).
	Extra []Route
	// ReadTimeout and WriteTimeout bound each non-streaming request (0: RequestReadTimeout and
	// RequestWriteTimeout).
	ReadTimeout, WriteTimeout time.Duration
	// Heartbeat is how often an event stream sends a comment when it has nothing else (0: DefaultHeartbeat).
	Heartbeat time.Duration
	// MetricsToken, when set, is the bearer token /metrics asks for; without one /metrics is served on the
	// operator listener when there is one (OperatorListener), otherwise to loopback clients.
	MetricsToken string
	// OperatorListener says /metrics and /status's details are served on a listener of their own
	// (OperatorHandler): the API's listener then answers /metrics only with the metrics token.
	OperatorListener bool
	// Lane is the background lane that yields to requests (nil: none; scheduler/lane).
	Lane *lane.Lane
	// Forward, on a cluster node, forwards a request of a route that runs where its project's instances
	// live (Route.OnNode) to the node hosting them (nil: a single node, everything is here).
	Forward *forward.Forwarder
}

// Server serves the API.
type Server struct {
	svc                       *appliance.Service
	log                       *slog.Logger
	routes                    []Route
	mux                       *http.ServeMux
	limiter                   *limiter
	openapi                   []byte
	readTimeout, writeTimeout time.Duration
	heartbeat                 time.Duration
	writeBudget               time.Duration // how long a stream's client may take to take one write
	done                      chan struct{} // closed by Close: event streams end
	closeOnce                 sync.Once
	stats                     httpStats // requests by route and status, for /metrics
	metricsToken              string
	operatorListener          bool
	lane                      *lane.Lane
	forward                   *forward.Forwarder
}

// New builds the server and its route table.
func New(svc *appliance.Service, opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	s := &Server{svc: svc, log: opts.Log, mux: http.NewServeMux(), limiter: newLimiter(opts.Limits),
		readTimeout: cmp.Or(opts.ReadTimeout, RequestReadTimeout), writeTimeout: cmp.Or(opts.WriteTimeout, RequestWriteTimeout),
		heartbeat: cmp.Or(opts.Heartbeat, DefaultHeartbeat), writeBudget: eventWriteBudget, done: make(chan struct{}), metricsToken: opts.MetricsToken,
		operatorListener: opts.OperatorListener, lane: opts.Lane, forward: opts.Forward}
	s.routes = append(s.table(), opts.Extra...)
	for i := range s.routes {
		rt := &s.routes[i]
		rt.checkParams()
		s.mux.Handle(rt.Method+" "+rt.Path, s.adapt(rt))
	}
	s.mux.HandleFunc("/", s.unmatched)
	doc, err := json.Marshal(OpenAPI(s.routes, svc.Config().Version))
	if err != nil {
		panic("openapi document: " + err.Error())
	}
	s.openapi = doc
	return s
}

// Routes returns the route table (the scope matrix test walks it).
func (s *Server) Routes() []Route { return s.routes }

// ServeHTTP sets the common headers and dispatches; each route applies the per-IP rate limit of its
// bucket, unmatched requests that of the general bucket.
func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	s.lane.Foreground() // background work yields to requests (scheduler/lane)
	w := &jsonErrors{ResponseWriter: rw}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	if headerSize(r) > MaxHeaderBytes {
		s.writeError(w, r, &appliance.Error{Kind: appliance.KindHeadersTooLarge, Msg: fmt.Sprintf("request headers exceed %d bytes", MaxHeaderBytes)})
		return
	}
	if err := cleanPath(r.URL.Path); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// needsDisk says whether a route writes, so that it is refused while the appliance is short of disk space:
// every POST, PUT and PATCH but signing in (an operator must be able to sign in to free space). Reads and
// deletions are served.
func needsDisk(rt *Route) bool {
	switch rt.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		return rt.Path != "/v1/auth/sessions"
	}
	return false
}

// cleanPath refuses a path that ServeMux would clean and redirect: an empty, "." or ".." segment (also
// when sent escaped, as %2E%2E), or a doubled slash. The API never answers with a redirect to another
// resource: a DELETE of /v1/projects/P/restore-points/.. must not become a DELETE of the project.
func cleanPath(p string) error {
	segs := strings.Split(p, "/")
	for i, sg := range segs[1:] {
		last := i == len(segs)-2
		if sg == "." || sg == ".." || (sg == "" && !last) {
			return appliance.Invalid("the path %q is not clean (no empty, \".\" or \"..\" segments): name the resource itself", p)
		}
	}
	return nil
}

// Per-request deadlines of every route but the streaming ones (see Route.Stream).
const (
	RequestReadTimeout  = 60 * time.Second
	RequestWriteTimeout = 120 * time.Second
	// MaxHeaderBytes is the request header size the API accepts (431 JSON above; net/http itself refuses
	// headers over ServerMaxHeaderBytes with its own plain-text 431).
	MaxHeaderBytes       = 64 << 10
	ServerMaxHeaderBytes = 1 << 20
)

// Close stops background work of the server.
// Close ends the event streams and stops background work (call it before http.Server.Shutdown, which
// waits for the streams' handlers).
func (s *Server) Close() {
	s.limiter.stop()
	s.closeOnce.Do(func() { close(s.done) })
}

var pathParam = regexp.MustCompile(`\{([A-Za-z]+)\}`)

// adapt wraps a route's Op with everything every endpoint shares.
func (s *Server) adapt(rt *Route) http.Handler {
	params := pathParam.FindAllStringSubmatch(rt.Path, -1)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer s.stats.observe(rt, w, time.Now())
		defer func() {
			if v := recover(); v != nil {
				s.log.Error("panic in handler", "route", rt.Method+" "+rt.Path, "panic", v)
				s.writeError(w, r, errors.New("panic"))
			}
		}()
		_, fromPeer := forward.FromPeer(r.Context())
		if r.Header.Get(forward.Header) != "" && !fromPeer {
			s.writeError(w, r, appliance.Forbidden("the %s header marks a request forwarded by a cluster node: a client may not send it", forward.Header))
			return
		}
		if !s.rateLimit(w, r, rt.Bucket) {
			return
		}
		if !rt.Stream {
			// A slow client may not hold a connection: the request is read and the answer written in
			// bounded time. (Errors: a writer that cannot set deadlines, as in tests, has no connection.)
			rc := http.NewResponseController(w)
			_ = rc.SetReadDeadline(time.Now().Add(s.readTimeout))
			_ = rc.SetWriteDeadline(time.Now().Add(s.writeTimeout))
		}
		// A route that may run on another node is refused for this node's disk only once it runs here.
		forwards := rt.OnNode && s.forward != nil
		if needsDisk(rt) && !forwards && s.svc.Storage().Disk().Low {
			s.writeError(w, r, s.svc.Storage().ErrDiskLow())
			return
		}
		req := &Request{Request: r, W: w, route: rt, params: params}
		if err := s.authorize(req, rt, params); err != nil {
			s.writeError(w, r, err)
			return
		}
		if p := req.Principal; p != nil && !s.rateLimitKey(w, credentialKey(p)) {
			return
		}
		if by, ok := forward.FromPeer(r.Context()); ok {
			s.log.Debug("serving a request forwarded by another node", "from_node", by, "method", r.Method, "path", r.URL.Path)
		}
		if forwards {
			// The caller is authenticated here (a refusal costs no hop) and again by the owning node,
			// which sees the same credentials.
			node, local, err := s.forward.OwnerFor(rt.NodeOf, r.PathValue)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			if !local {
				if fromPeer { // never forwarded twice: the nodes disagree on where the project is
					s.writeError(w, r, &appliance.Error{Kind: appliance.KindUnavailable, Msg: fmt.Sprintf("the project's instances are on cluster node %s, not on the node this request was forwarded to: try again", node.ID)})
					return
				}
				s.forward.Forward(w, r, node)
				return
			}
			if needsDisk(rt) && s.svc.Storage().Disk().Low {
				s.writeError(w, r, s.svc.Storage().ErrDiskLow())
				return
			}
		}
		q, err := rt.parseQuery(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		req.query = q
		switch {
		case rt.Do.Body != nil:
			if req.body, err = decodeBody(r, rt.Do.Body); err != nil {
				s.writeError(w, r, err)
				return
			}
		case rt.RawBody == "":
			if err := noBody(r); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		out, err := rt.Do.fn(req)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if rt.Do.Resp != nil {
			writeJSON(w, rt.Status, out)
		}
	})
}

// rateLimit takes a token of bucket for the caller's IP, or answers 429 with Retry-After and reports false.
func (s *Server) rateLimit(w http.ResponseWriter, r *http.Request, bucket string) bool {
	wait, ok := s.limiter.allow(keyrate.AddressKey(clientIP(r)), bucket)
	return ok || s.tooMany(w, wait)
}

// rateLimitKey takes a token of the credential's bucket.
func (s *Server) rateLimitKey(w http.ResponseWriter, credential string) bool {
	wait, ok := s.limiter.allow(credential, BucketCredential)
	return ok || s.tooMany(w, wait)
}

// credentialKey names a caller's credential: its API key, or its user's session.
func credentialKey(p *appliance.Principal) string {
	if p.APIKeyID != "" {
		return "key " + p.APIKeyID
	}
	if id := p.ServiceTokenID(); id != "" {
		return "service token " + id
	}
	return "user " + p.UserID
}

// tooMany answers 429 with Retry-After; it reports false (the request is refused).
func (s *Server) tooMany(w http.ResponseWriter, wait time.Duration) bool {
	w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
	writeJSON(w, http.StatusTooManyRequests, errorBody{Error: "rate limit exceeded; retry after the number of seconds in Retry-After"})
	return false
}

// authorize authenticates the caller and applies the route's auth mode, scope and project binding.
func (s *Server) authorize(req *Request, rt *Route, params [][]string) error {
	if rt.Auth == Public {
		return nil
	}
	tok, viaCookie := credential(req.Request)
	if viaCookie && !safeMethod(req.Method) {
		if err := sameOrigin(req.Request); err != nil {
			return err
		}
	}
	authenticate := s.svc.Identity().Authenticate
	if appliance.IsServiceToken(tok) {
		authenticate = s.svc.ProgramApps().Authenticate
	}
	p, err := authenticate(req.Context(), tok)
	if err != nil {
		return err
	}
	req.Principal = p
	if rt.Auth == ServiceToken && !p.IsServiceToken() {
		return appliance.Forbidden("this endpoint takes a service token (%s…, minted by a platform operator) only: API keys and sessions are refused", api.ServiceTokenPrefix)
	}
	if rt.Auth != ServiceToken && p.IsServiceToken() {
		return appliance.Forbidden("a service token only submits program applications (POST /v1/program-applications): it is refused here")
	}
	if rt.Auth == SessionOnly && !p.IsSession() {
		return appliance.Forbidden("this endpoint needs a signed-in session, not an API key")
	}
	if p.Unaffiliated() && !rt.Unaffiliated {
		return appliance.Forbidden("this session belongs to no organization: it can only read /v1/me and answer its invitations (GET /v1/me/invitations) until it accepts one")
	}
	if rt.Operator && !p.IsAdmin {
		return appliance.Forbidden("this endpoint is for platform operators (a signed-in user with is_admin)")
	}
	for _, sc := range rt.scopes() {
		if p.Has(sc) {
			continue
		}
		if p.IDPOrganizationRole != "" && !appliance.RoleGrants(p.IDPOrganizationRole, sc) {
			whose := "the organization role"
			if !p.IsSession() {
				whose = "its creator's organization role"
			}
			return appliance.Forbidden("this credential lacks the scope %s, which %s %s does not grant", sc, whose, p.IDPOrganizationRole)
		}
		return appliance.Forbidden("this credential lacks the scope %s", sc)
	}
	if p.ProjectID != "" {
		if rt.OrgLevel {
			return appliance.Forbidden("this API key is restricted to project %s and cannot act on the organization", p.ProjectID)
		}
		for _, m := range params {
			if m[1] == "projectID" && req.PathValue("projectID") != p.ProjectID {
				return appliance.Forbidden("this API key is restricted to project %s", p.ProjectID)
			}
		}
	}
	return nil
}

// stillAllowed authenticates the request's credential again and applies its route's checks as at the
// start of the request; it fails when the credential was revoked or expired, its session ended, its user
// left the organization, or its rights changed in any way since the request began (Principal.SameRights).
// Long-lived answers (the streams) call it while they run, so a credential that lost access loses them too.
func (s *Server) stillAllowed(r *Request) error {
	again := &Request{Request: r.Request, W: r.W, route: r.route, params: r.params}
	if err := s.authorize(again, r.route, r.params); err != nil {
		return err
	}
	if r.Principal == nil && again.Principal == nil { // a public route
		return nil
	}
	if r.Principal == nil || again.Principal == nil || !r.Principal.SameRights(again.Principal) {
		return appliance.Forbidden("the credential's rights changed since this request began")
	}
	return nil
}

// credential reads the bearer token or X-API-Key, else the dashboard's session cookie when the request
// also carries the CSRF header (viaCookie then).
func credential(r *http.Request) (tok string, viaCookie bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		// The scheme is case-insensitive (RFC 9110 §11.1): "bearer" and "BEARER" are "Bearer".
		if scheme, tok, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok), false
		}
		return "", false
	}
	if k := strings.TrimSpace(r.Header.Get("X-API-Key")); k != "" {
		return k, false
	}
	if c, err := r.Cookie(SessionCookie); err == nil && r.Header.Get(CSRFHeader) == "1" {
		return c.Value, true
	}
	return "", false
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// sameOrigin refuses a request a browser says comes from another site: Sec-Fetch-Site other than
// same-origin or none (typed in, a bookmark), or an Origin whose host is not the one the request was sent
// to ("null" too: a sandboxed or file page). Programs send neither header and pass. It guards the writes
// the session cookie authenticates and the sign-in that sets the cookie (login CSRF).
func sameOrigin(r *http.Request) error {
	refuse := appliance.Forbidden("a request from another site may not act with the session cookie")
	if r.URL.Path == "/v1/auth/sessions" {
		refuse = appliance.Forbidden("a sign-in from another site is refused")
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return refuse
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return refuse
		}
	}
	return nil
}

// clientIP is the caller's address (on a request a cluster node forwarded, the original caller's).
func clientIP(r *http.Request) string { return forward.ClientIP(r) }

// unmatched answers requests no route takes: 405 when the path exists with other methods, else 404.
func (s *Server) unmatched(w http.ResponseWriter, r *http.Request) {
	if !s.rateLimit(w, r, "") {
		return
	}
	var allow []string
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		probe := r.Clone(context.Background())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: "method " + r.Method + " is not allowed on " + r.URL.Path})
		return
	}
	writeJSON(w, http.StatusNotFound, errorBody{Error: "no such endpoint: " + r.Method + " " + r.URL.Path})
}

// errorBody is an error answer without details (the error's fields, when it has some, are sent as a map).
type errorBody = api.ErrorBody

var statusOf = map[appliance.Kind]int{
	appliance.KindInternal:            http.StatusInternalServerError,
	appliance.KindInvalid:             http.StatusBadRequest,
	appliance.KindUnauthenticated:     http.StatusUnauthorized,
	appliance.KindForbidden:           http.StatusForbidden,
	appliance.KindNotFound:            http.StatusNotFound,
	appliance.KindConflict:            http.StatusConflict,
	appliance.KindGone:                http.StatusGone,
	appliance.KindUnavailable:         http.StatusServiceUnavailable,
	appliance.KindTooLarge:            http.StatusRequestEntityTooLarge,
	appliance.KindTooMany:             http.StatusTooManyRequests,
	appliance.KindHeadersTooLarge:     http.StatusRequestHeaderFieldsTooLarge,
	appliance.KindInsufficientStorage: http.StatusInsufficientStorage,
	appliance.KindUnsupportedMedia:    http.StatusUnsupportedMediaType,
}

// publicMessage is the message of err a caller may see ("internal error" for an internal one).
func publicMessage(err error) string {
	if errors.Is(err, appliance.ErrStoreUnavailable) { // a cluster without quorum, whatever wrapped it
		return appliance.ErrStoreUnavailable.Error()
	}
	if errors.Is(err, appliance.ErrStoreNewerLayout) { // a node left on an older version, whatever wrapped it
		return appliance.ErrStoreNewerLayout.Error()
	}
	var ae *appliance.Error
	if errors.As(err, &ae) && appliance.KindOf(err) != appliance.KindInternal {
		return ae.Msg
	}
	return "internal error"
}

// writeError sends the public message of err; internal causes are logged, never sent.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	kind := appliance.KindOf(err)
	status := statusOf[kind]
	msg := publicMessage(err)
	var fields map[string]any
	var ae *appliance.Error
	if errors.As(err, &ae) && kind != appliance.KindInternal {
		fields = ae.Fields
	}
	if kind == appliance.KindInternal || kind == appliance.KindUnavailable {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if kind == appliance.KindUnauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="appliance"`)
	}
	if ae != nil && ae.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((ae.RetryAfter+time.Second-1)/time.Second)))
	}
	if kind == appliance.KindTooLarge {
		connlimit.DrainRefusedBody(w, r)
	}
	if len(fields) > 0 {
		body := map[string]any{"error": msg}
		for k, v := range fields {
			if k != "error" {
				body[k] = v
			}
		}
		writeJSON(w, status, body)
		return
	}
	writeJSON(w, status, errorBody{Error: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.Encode(v)
}

func headerSize(r *http.Request) int {
	n := len(r.RequestURI)
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// jsonErrors makes the error answers net/http writes for us (http.Error, ServeContent's 416) JSON like
// every other: a text/plain error status becomes {"error": "<its text>"}.
type jsonErrors struct {
	http.ResponseWriter
	shaped, wrote bool
	status        int // the status written (0: none yet)
}

func (w *jsonErrors) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	if code >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.shaped = true
		w.Header().Set("Content-Type", "application/json")
		w.Header().Del("Content-Length")
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *jsonErrors) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if !w.shaped {
		return w.ResponseWriter.Write(b)
	}
	if !w.wrote {
		w.wrote = true
		out, _ := json.Marshal(errorBody{Error: strings.TrimSpace(string(b))})
		if _, err := w.ResponseWriter.Write(append(out, '\n')); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// Unwrap lets http.ResponseController reach the connection (deadlines, flushing).
func (w *jsonErrors) Unwrap() http.ResponseWriter { return w.ResponseWriter }
