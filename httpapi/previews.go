package httpapi

import "github.com/theappliance/appliance/appliance"

func (s *Server) listPreviews(r *Request) (*appliance.PreviewList, error) {
	return s.svc.ListPreviews(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) createPreview(r *Request, body *appliance.CreatePreviewRequest) (*appliance.PreviewJobResponse, error) {
	return s.svc.CreatePreview(r.Context(), r.Principal, r.PathValue("projectID"), body)
}

func (s *Server) deletePreview(r *Request) (*appliance.JobResponse, error) {
	return s.svc.DeletePreview(r.Context(), r.Principal, r.PathValue("previewID"))
}

func (s *Server) extendPreview(r *Request, body *appliance.ExtendPreviewRequest) (*appliance.PreviewResponse, error) {
	return s.svc.ExtendPreview(r.Context(), r.Principal, r.PathValue("previewID"), body)
}

func (s *Server) previewConnections(r *Request) (*appliance.ConnectionsResponse, error) {
	return s.svc.PreviewConnections(r.Context(), r.Principal, r.PathValue("previewID"))
}

func (s *Server) resetPreview(r *Request) (*appliance.JobResponse, error) {
	return s.svc.ResetPreview(r.Context(), r.Principal, r.PathValue("previewID"))
}

func (s *Server) listCutovers(r *Request) (*appliance.CutoverRequestList, error) {
	return s.svc.ListCutoverRequests(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) getCutover(r *Request) (*appliance.CutoverRequestResponse, error) {
	return s.svc.GetCutoverRequest(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("requestID"))
}

func (s *Server) requestCutover(r *Request, body *appliance.CreateCutoverRequest) (*appliance.CutoverRequestResponse, error) {
	return s.svc.RequestCutover(r.Context(), r.Principal, r.PathValue("projectID"), body)
}

func (s *Server) approveCutover(r *Request, body *appliance.ApproveCutoverRequest) (*appliance.CutoverJobResponse, error) {
	return s.svc.ApproveCutover(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("requestID"), body)
}

func (s *Server) rejectCutover(r *Request, body *appliance.RejectCutoverRequest) (*appliance.CutoverRequestResponse, error) {
	return s.svc.RejectCutover(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("requestID"), body)
}
