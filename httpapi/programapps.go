package httpapi

import "github.com/theappliance/appliance/api"

// listProgramApplications is GET /v1/program-applications: the query's status and limit.
func (s *Server) listProgramApplications(r *Request) (*api.ProgramApplicationList, error) {
	return s.svc.ProgramApps().List(r.Context(), r.Principal, r.Str("status"), r.Int("limit"))
}

func (s *Server) listAllReferrals(r *Request) (*api.ReferralList, error) {
	return s.svc.Referrals().ListAll(r.Context(), r.Principal, r.Str("status"))
}
