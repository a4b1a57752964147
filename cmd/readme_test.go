package cmd

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestREADMEListsEveryUpFlag: the README's table of up's flags has a row for each flag, with the
// environment variable the flag's help names, and no row for a flag that does not exist.
func TestREADMEListsEveryUpFlag(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // flag → its row
	for _, line := range strings.Split(string(readme), "\n") {
		if m := regexp.MustCompile("^\\| `--([a-z0-9-]+)` \\|").FindStringSubmatch(line); m != nil {
			rows[m[1]] = line
		}
	}
	up, _, err := root.Find([]string{"up"})
	if err != nil {
		t.Fatal(err)
	}
	env := regexp.MustCompile(`APPLIANCE_[A-Z_]+`)
	up.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		row, ok := rows[f.Name]
		if !ok {
			t.Errorf("README.md: no row for up --%s", f.Name)
			return
		}
		delete(rows, f.Name)
		if v := env.FindString(f.Usage); v != "" && !strings.Contains(row, "`"+v+"`") && !strings.Contains(row, "`"+v+"=") {
			t.Errorf("README.md: the row of --%s does not name %s", f.Name, v)
		}
	})
	for name := range rows {
		t.Errorf("README.md: a row for --%s, which up does not have", name)
	}
}
