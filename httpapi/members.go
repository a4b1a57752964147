package httpapi

import "github.com/theappliance/appliance/appliance"

func (s *Server) listMembers(r *Request) (*appliance.MemberList, error) {
	return s.svc.ListMembers(r.Context(), r.Principal, r.PathValue("orgID"))
}

func (s *Server) addMember(r *Request, body *appliance.AddMemberRequest) (*appliance.AddedMember, error) {
	return s.svc.AddMember(r.Context(), r.Principal, r.PathValue("orgID"), body)
}

func (s *Server) setMemberRole(r *Request, body *appliance.SetMemberRoleRequest) (*appliance.MemberResponse, error) {
	return s.svc.SetMemberRole(r.Context(), r.Principal, r.PathValue("orgID"), r.PathValue("userID"), body)
}

func (s *Server) removeMember(r *Request) (*appliance.RemovedMember, error) {
	return s.svc.RemoveMember(r.Context(), r.Principal, r.PathValue("orgID"), r.PathValue("userID"))
}

func (s *Server) changePassword(r *Request, body *appliance.ChangePasswordRequest) (*appliance.PasswordChanged, error) {
	return s.svc.ChangePassword(r.Context(), r.Principal, body)
}
