package httpapi

import "github.com/theappliance/appliance/api"

// claimTokenHeader carries an ephemeral database's claim token.
const claimTokenHeader = "X-Service-Claim-Token"

func (s *Server) createEphemeral(r *Request, body *api.CreateEphemeralRequest) (*api.EphemeralCreated, error) {
	return s.svc.Previews().CreateEphemeral(r.Context(), clientIP(r.Request), body)
}

func (s *Server) getEphemeral(r *Request) (*api.EphemeralResponse, error) {
	return s.svc.Previews().GetEphemeral(r.Context(), r.PathValue("projectID"), r.Header.Get(claimTokenHeader))
}

func (s *Server) deleteEphemeral(r *Request) (*api.JobResponse, error) {
	return s.svc.Previews().DeleteEphemeral(r.Context(), r.PathValue("projectID"), r.Header.Get(claimTokenHeader))
}
