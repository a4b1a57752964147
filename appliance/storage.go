package appliance

import "github.com/theappliance/appliance/appliance/storageguard"

// The storage guard and the disk reserve live in appliance/storageguard (the locks of the databases over
// their storage limits, the free space of the data directory and the degraded mode under its reserve); the
// service holds it, built in New.

// DefaultDiskReserve is the reserve when the operator names none (Config.DiskReserve 0).
const DefaultDiskReserve = storageguard.DefaultDiskReserve

// Storage is the storage guard and the disk monitor: up runs the guard and registers the disk's status row,
// httpapi refuses writes while the disk is short (507).
func (s *Service) Storage() *storageguard.Guard { return s.storage }
