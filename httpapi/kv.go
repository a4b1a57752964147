package httpapi

import "github.com/theappliance/appliance/appliance"

func (s *Server) listKV(r *Request) (*appliance.KVStoreList, error) {
	return s.svc.ListKV(r.Context(), r.Principal, r.Str("organization_id"))
}

func (s *Server) getKV(r *Request) (*appliance.KVStore, error) {
	return s.svc.GetKV(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) createKV(r *Request) (*appliance.KVCreateResponse, error) {
	return s.svc.CreateKV(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) deleteKV(r *Request) (*appliance.JobResponse, error) {
	return s.svc.DeleteKV(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) kvCredentials(r *Request) (*appliance.KVCredentials, error) {
	return s.svc.KVCredentialsOf(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) rotateKVToken(r *Request) (*appliance.KVStoreResult, error) {
	return s.svc.RotateKVToken(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) flushKV(r *Request) (*appliance.JobResponse, error) {
	return s.svc.FlushKV(r.Context(), r.Principal, r.PathValue("projectID"))
}
