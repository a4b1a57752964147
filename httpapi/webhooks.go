package httpapi

import "github.com/theappliance/appliance/api"

func (s *Server) listWebhookDeliveries(r *Request) (*api.WebhookDeliveryList, error) {
	return s.svc.Webhooks().ListDeliveries(r.Context(), r.Principal, r.PathValue("orgID"), r.PathValue("endpointID"), r.Int("limit"))
}
