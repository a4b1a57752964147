package cmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance/node"
)

func init() {
	var cfg UpConfig
	doctor := &cobra.Command{
		Use:   "doctor",
		Short: "Check everything `appliance up` needs and say how to fix what is missing",
		Long: `Check the programs the appliance runs (and where each comes from), the OS user instances run as, the
data directory, the listeners' ports and the instance port range, disk space, the clock, the certificate
authority, the metadata store (readable, undamaged, not older than the data directory, and matching
what the data directory holds) and the backup store (a bucket: it exists and the credentials work; while an appliance runs on the data
directory, what its /status says of the store: the last upload, the WAL lag in bytes and seconds). It installs nothing: each problem comes with the command that fixes it. Exits 1 when up would
refuse to start. Takes the same flags and environment variables as up.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := loadUpConfig(c, &cfg); err != nil {
				return err
			}
			checks, _ := node.Doctor{Status: runningComponent}.Run(c.Context(), cfg)
			if printChecks(c.OutOrStdout(), checks) {
				return errDoctorFailed
			}
			return nil
		},
	}
	upFlags(doctor, &cfg)
	root.AddCommand(doctor)
}

var errDoctorFailed = fmt.Errorf("some checks failed: see the fixes above")

// printChecks writes the report and says whether anything failed.
func printChecks(w io.Writer, checks []node.Check) (failed bool) {
	var rows [][]string
	for _, c := range checks {
		rows = append(rows, []string{c.Level, c.Name, c.Detail})
		if c.Fix != "" {
			rows = append(rows, []string{"", "", "  fix: " + c.Fix})
		}
		failed = failed || c.Level == node.LevelFail
	}
	writeTable(w, nil, rows)
	return failed
}
