package httpapi

import "github.com/theappliance/appliance/api"

func (s *Server) listKV(r *Request) (*api.KVStoreList, error) {
	return s.svc.KV().List(r.Context(), r.Principal, r.Str("organization_id"))
}
