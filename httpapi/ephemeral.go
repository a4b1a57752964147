package httpapi

import "github.com/theappliance/appliance/appliance"

// claimTokenHeader carries an ephemeral database's claim token.
const claimTokenHeader = "X-Service-Claim-Token"

func (s *Server) createEphemeral(r *Request, body *appliance.CreateEphemeralRequest) (*appliance.EphemeralCreated, error) {
	return s.svc.CreateEphemeral(r.Context(), clientIP(r.Request), body)
}

func (s *Server) getEphemeral(r *Request) (*appliance.EphemeralResponse, error) {
	return s.svc.GetEphemeral(r.Context(), r.PathValue("projectID"), r.Header.Get(claimTokenHeader))
}

func (s *Server) deleteEphemeral(r *Request) (*appliance.JobResponse, error) {
	return s.svc.DeleteEphemeral(r.Context(), r.PathValue("projectID"), r.Header.Get(claimTokenHeader))
}
