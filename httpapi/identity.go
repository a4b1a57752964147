package httpapi

import "github.com/theappliance/appliance/appliance"

func (s *Server) me(r *Request) (*appliance.MeResponse, error) {
	return s.svc.Me(r.Context(), r.Principal)
}

func (s *Server) createSession(r *Request, body *appliance.SessionRequest) (*appliance.SessionResult, error) {
	return s.svc.CreateSession(r.Context(), body)
}

func (s *Server) startCLILogin(r *Request, body *appliance.CLILoginStartRequest) (*appliance.CLILoginStart, error) {
	return s.svc.StartCLILogin(r.Context(), body)
}

func (s *Server) pollCLILogin(r *Request) (*appliance.CLILoginResult, error) {
	return s.svc.PollCLILogin(r.Context(), r.PathValue("sessionID"), r.Str("poll_token"))
}

func (s *Server) cliLoginDetails(r *Request) (*appliance.CLILoginDetails, error) {
	return s.svc.CLILoginDetailsFor(r.Context(), r.Principal, r.PathValue("sessionID"))
}

func (s *Server) authorizeCLILogin(r *Request) (*appliance.CLILoginResult, error) {
	return s.svc.AuthorizeCLILogin(r.Context(), r.Principal, r.PathValue("sessionID"))
}
