package pglog

import "github.com/theappliance/appliance/api"

// Entry is one log entry as the API shows it (a wire type of package api).
type Entry = api.Entry
