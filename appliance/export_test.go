package appliance

// ReleaseWakeFront lets go of the ports the wake front holds for a project, as the appliance's exit does
// (tests of a restart with suspended projects).
func ReleaseWakeFront(s *Service, projectID string) { s.z.Release(projectID) }
