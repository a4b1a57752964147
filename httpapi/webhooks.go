package httpapi

import "github.com/theappliance/appliance/appliance"

func (s *Server) listWebhookDeliveries(r *Request) (*appliance.WebhookDeliveryList, error) {
	return s.svc.ListWebhookDeliveries(r.Context(), r.Principal, r.PathValue("orgID"), r.PathValue("endpointID"), r.Int("limit"))
}
