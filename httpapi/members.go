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

func (s *Server) listInvitations(r *Request) (*appliance.InvitationList, error) {
	return s.svc.ListInvitations(r.Context(), r.Principal, r.PathValue("orgID"))
}

func (s *Server) revokeInvitation(r *Request) (*appliance.InvitationDone, error) {
	return s.svc.RevokeInvitation(r.Context(), r.Principal, r.PathValue("orgID"), r.PathValue("invitationID"))
}

func (s *Server) myInvitations(r *Request) (*appliance.InvitationList, error) {
	return s.svc.MyInvitations(r.Context(), r.Principal)
}

func (s *Server) acceptInvitation(r *Request) (*appliance.MemberResponse, error) {
	return s.svc.AcceptInvitation(r.Context(), r.Principal, r.PathValue("invitationID"))
}

func (s *Server) declineInvitation(r *Request) (*appliance.InvitationDone, error) {
	return s.svc.DeclineInvitation(r.Context(), r.Principal, r.PathValue("invitationID"))
}
