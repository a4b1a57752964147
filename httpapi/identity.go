package httpapi

import (
	"net/http"

	"github.com/theappliance/appliance/api"
)

// SessionCookie holds the dashboard's session; it authenticates a request only together with the
// CSRFHeader, which a cross-site page cannot send without a CORS preflight the API never grants.
const (
	SessionCookie = "appliance_session"
	CSRFHeader    = "X-Appliance-CSRF"
)

func (s *Server) createSession(r *Request, body *api.SessionRequest) (*api.SessionResult, error) {
	if err := sameOrigin(r.Request); err != nil {
		return nil, err
	}
	res, err := s.svc.Identity().CreateSession(r.Context(), body)
	if err != nil || !body.Cookie {
		return res, err
	}
	setSessionCookie(r.W, res)
	return res, nil
}

// setSessionCookie hands a new session to the dashboard as its cookie (a sign-in's, a sign-up's): the
// token leaves the answer's body.
func setSessionCookie(w http.ResponseWriter, res *api.SessionResult) {
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: res.Token, Path: "/", Expires: res.ExpiresAt,
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	res.Token = ""
}

func (s *Server) signOut(r *Request) (*api.SignedOut, error) {
	res, err := s.svc.Identity().SignOut(r.Context(), r.Principal)
	if err == nil {
		http.SetCookie(r.W, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	}
	return res, err
}

func (s *Server) startCLILogin(r *Request, body *api.CLILoginStartRequest) (*api.CLILoginStart, error) {
	return s.svc.Identity().StartCLILogin(r.Context(), body)
}

func (s *Server) pollCLILogin(r *Request) (*api.CLILoginResult, error) {
	return s.svc.Identity().PollCLILogin(r.Context(), r.PathValue("sessionID"), r.Str("poll_token"))
}
