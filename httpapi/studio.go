package httpapi

import "github.com/theappliance/appliance/api"

func (s *Server) sqlHistory(r *Request) (*api.SQLHistoryList, error) {
	return s.svc.Studio().SQLHistory(r.Context(), r.Principal, r.PathValue("projectID"), r.Int("limit"))
}

func (s *Server) readRows(r *Request) (*api.RowsReadResponse, error) {
	return s.svc.Studio().ReadRows(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("schema"), r.PathValue("table"), r.Int("limit"), r.Int("offset"))
}
