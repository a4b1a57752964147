//go:build !testhooks

package node

import (
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/scheduler"
)

// Without the testhooks build tag the binary registers no diagnostic job types or routes.
func registerTestHooks(*scheduler.Runner) {}

func testJobStepHook() appliance.JobStepHook { return nil }

func testRoutes(*appliance.Service, *scheduler.Runner) []httpapi.Route { return nil }
