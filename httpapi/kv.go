package httpapi

import "github.com/theappliance/appliance/appliance"

func (s *Server) listKV(r *Request) (*appliance.KVStoreList, error) {
	return s.svc.ListKV(r.Context(), r.Principal, r.Str("organization_id"))
}
