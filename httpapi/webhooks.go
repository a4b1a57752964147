package httpapi

import "github.com/theappliance/appliance/appliance"

func (s *Server) listWebhookEndpoints(r *Request) (*appliance.WebhookEndpointList, error) {
	return s.svc.ListWebhookEndpoints(r.Context(), r.Principal, r.PathValue("orgID"))
}

func (s *Server) createWebhookEndpoint(r *Request, body *appliance.CreateWebhookEndpointRequest) (*appliance.WebhookEndpointWithSecret, error) {
	return s.svc.CreateWebhookEndpoint(r.Context(), r.Principal, r.PathValue("orgID"), body)
}

func (s *Server) patchWebhookEndpoint(r *Request, body *appliance.PatchWebhookEndpointRequest) (*appliance.WebhookEndpointResult, error) {
	return s.svc.PatchWebhookEndpoint(r.Context(), r.Principal, r.PathValue("orgID"), r.PathValue("endpointID"), body)
}

func (s *Server) deleteWebhookEndpoint(r *Request) (*appliance.DeletedResponse, error) {
	return s.svc.DeleteWebhookEndpoint(r.Context(), r.Principal, r.PathValue("orgID"), r.PathValue("endpointID"))
}

func (s *Server) rotateWebhookSecret(r *Request) (*appliance.WebhookEndpointWithSecret, error) {
	return s.svc.RotateWebhookSecret(r.Context(), r.Principal, r.PathValue("orgID"), r.PathValue("endpointID"))
}

func (s *Server) listWebhookDeliveries(r *Request) (*appliance.WebhookDeliveryList, error) {
	return s.svc.ListWebhookDeliveries(r.Context(), r.Principal, r.PathValue("orgID"), r.PathValue("endpointID"), r.Int("limit"))
}

func (s *Server) redeliverWebhook(r *Request) (*appliance.WebhookDeliveryResult, error) {
	return s.svc.RedeliverWebhook(r.Context(), r.Principal, r.PathValue("orgID"), r.PathValue("endpointID"), r.PathValue("deliveryID"))
}

func (s *Server) testWebhookEndpoint(r *Request) (*appliance.WebhookDeliveryResult, error) {
	return s.svc.TestWebhookEndpoint(r.Context(), r.Principal, r.PathValue("orgID"), r.PathValue("endpointID"))
}
