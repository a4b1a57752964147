package httpapi

import "github.com/theappliance/appliance/appliance"

func (s *Server) runSQL(r *Request, body *appliance.SQLRequest) (*appliance.SQLResultResponse, error) {
	return s.svc.RunSQL(r.Context(), r.Principal, r.PathValue("projectID"), body)
}

func (s *Server) sqlHistory(r *Request) (*appliance.SQLHistoryList, error) {
	return s.svc.SQLHistory(r.Context(), r.Principal, r.PathValue("projectID"), r.Int("limit"))
}

func (s *Server) listTables(r *Request) (*appliance.TableList, error) {
	return s.svc.ListTables(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) tableColumns(r *Request) (*appliance.ColumnList, error) {
	return s.svc.TableColumns(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("schema"), r.PathValue("table"))
}

func (s *Server) readRows(r *Request) (*appliance.RowsReadResponse, error) {
	return s.svc.ReadRows(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("schema"), r.PathValue("table"), r.Int("limit"), r.Int("offset"))
}

func (s *Server) insertRows(r *Request, body *appliance.InsertRowsRequest) (*appliance.RowsWriteResponse, error) {
	return s.svc.InsertRows(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("schema"), r.PathValue("table"), body)
}

func (s *Server) updateRows(r *Request, body *appliance.UpdateRowsRequest) (*appliance.RowsWriteResponse, error) {
	return s.svc.UpdateRows(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("schema"), r.PathValue("table"), body)
}

func (s *Server) deleteRows(r *Request, body *appliance.DeleteRowsRequest) (*appliance.RowsWriteResponse, error) {
	return s.svc.DeleteRows(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("schema"), r.PathValue("table"), body)
}

func (s *Server) getAIUsage(r *Request) (*appliance.AIUsageResponse, error) {
	return s.svc.GetAIUsage(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) recordAIUse(r *Request) (*appliance.AIUsageResponse, error) {
	return s.svc.RecordAIUse(r.Context(), r.Principal, r.PathValue("projectID"))
}
