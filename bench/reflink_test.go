package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/previews"
)

// BenchmarkCloneSizes: for each project size in BENCH_CLONE_MBS (100,1024), a project of that many MB of
// table (cloneSource), then BENCH_ROUNDS (5) rounds, each timing in turn (the order rotating, so that ours
// and each reference alternate) a clone preview (POST → first SELECT 1 on the clone), and the references
// named in BENCH_CLONE_KINDS (all by default), run by hand as the instances' OS user on the project's data
// directory:
//
//   - "cp --reflink=always": the physical limit of a copy on a filesystem with reflinks (only where the
//     data directory has them), then `sync -f` of the copy's filesystem;
//   - "cp -a + sync": a byte copy, then `sync -f`: a durable copy;
//   - "pg_basebackup": `pg_basebackup -X stream` with its default sync of what it wrote.
//
// The data directory is the temporary directory's filesystem: run it with TMPDIR on an XFS mount (see
// bench/README.md) to measure the reflink path, on ext4 for today's byte copy.
func BenchmarkCloneSizes(b *testing.B) {
	rounds := envInt(b, "BENCH_ROUNDS", 5)
	sizes := envInts(b, "BENCH_CLONE_MBS", []int{100, 1024})
	want := map[string]bool{}
	for _, k := range strings.Split(os.Getenv("BENCH_CLONE_KINDS"), ",") {
		if k = strings.TrimSpace(k); k != "" {
			want[k] = true
		}
	}
	for _, mb := range sizes {
		b.Run(fmt.Sprintf("%dMB", mb), func(b *testing.B) {
			b.Setenv("BENCH_CLONE_MB", strconv.Itoa(mb))
			e, p, prj, inst, size := cloneSource(b)
			ctx := b.Context()
			user, admin := sourceAccess(b, e, inst)
			reflinks, err := postgres.ReflinkSupport(inst.Dir)
			if err != nil {
				b.Fatal(err)
			}
			scratch := appliancetest.TraversableTempDir(b)
			if err := user.Chown(scratch); err != nil {
				b.Fatal(err)
			}
			bb, err := e.Bin.Path("pg_basebackup")
			if err != nil {
				b.Fatal(err)
			}
			// run times the commands; a copy of the live directory that met a file vanishing under it (the
			// archiver's status files) is started over, up to 3 times, and only the last attempt counts.
			run := func(dst string, cmds ...func() *exec.Cmd) time.Duration {
				for attempt := 1; ; attempt++ {
					t0 := time.Now()
					var failed error
					for _, mk := range cmds {
						cmd := mk()
						if out, err := cmd.CombinedOutput(); err != nil {
							failed = fmt.Errorf("%s: %v\n%s", cmd, err, out)
							break
						}
					}
					if failed == nil {
						return time.Since(t0)
					}
					if attempt == 3 || !strings.Contains(failed.Error(), "No such file or directory") {
						b.Fatal(failed)
					}
					os.RemoveAll(dst)
				}
			}
			cmd := func(name string, args ...string) func() *exec.Cmd {
				return func() *exec.Cmd { return user.Command(name, args...) }
			}
			src := filepath.Join(inst.Dir, "pgdata")
			kinds := []string{"preview"}
			for _, k := range []string{"cp --reflink=always", "cp -a + sync", "pg_basebackup"} {
				if (len(want) == 0 || want[k]) && (k != "cp --reflink=always" || reflinks) {
					kinds = append(kinds, k)
				}
			}
			got := map[string][]time.Duration{}
			for r := range rounds {
				for k := range kinds {
					kind := kinds[(k+r)%len(kinds)]
					dst := filepath.Join(scratch, fmt.Sprintf("%d-%d", r, k))
					switch kind {
					case "preview":
						d, id := timePreview(b, e, p, prj.ID, previews.ModeClone)
						got[kind] = append(got[kind], d)
						res, err := e.Svc.Previews().Delete(ctx, p, id)
						if err != nil {
							b.Fatal(err)
						}
						e.WaitJob(b, res.Job.ID)
					case "cp --reflink=always":
						got[kind] = append(got[kind], run(dst, cmd("cp", "-a", "--reflink=always", src, dst), cmd("sync", "-f", scratch)))
					case "cp -a + sync":
						got[kind] = append(got[kind], run(dst, cmd("cp", "-a", src, dst), cmd("sync", "-f", scratch)))
					case "pg_basebackup":
						got[kind] = append(got[kind], run(dst, func() *exec.Cmd {
							c := user.Command(bb, "-D", dst, "-F", "p", "-X", "stream", "--checkpoint=fast", "--no-password",
								"-h", "127.0.0.1", "-p", strconv.Itoa(inst.Port), "-U", "appliance_admin")
							c.Env = append(os.Environ(), "PGPASSWORD="+string(admin), "PGSSLMODE=disable")
							return c
						}))
					}
					os.RemoveAll(dst)
				}
			}
			ours := median(got["preview"])
			line := fmt.Sprintf("project of %d MB, reflinks %t; medians of %d rounds: clone preview POST -> first SELECT 1 %.0f ms",
				size>>20, reflinks, rounds, ms(ours))
			for _, k := range kinds[1:] {
				line += fmt.Sprintf("; %s %.0f ms (preview / it %.2f)", k, ms(median(got[k])), float64(ours)/float64(median(got[k])))
			}
			b.Log(line)
			for _, k := range kinds {
				d := slices.Clone(got[k])
				b.Logf("%s: %s", k, joinMS(d))
			}
		})
	}
}
