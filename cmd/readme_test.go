package cmd

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/appliance/appliancetest"
)

const (
	upFlagsBegin = "<!-- up-flags:begin (the rows follow up's flag table in cmd/up.go: UPDATE_DOCS=1 go test ./cmd -run TestREADMEListsEveryUpFlag) -->\n"
	upFlagsEnd   = "<!-- up-flags:end -->"
)

// TestREADMEListsEveryUpFlag: the README's table of up's flags has a row for each flag of upFlagTable, in
// its order, with its environment variable (which the flag's help names), and no other row; a default the
// table fixes starts its row's last column. UPDATE_DOCS=1 rewrites the rows' first two columns and their
// order, keeps each row's description, and adds a row (default and help) for a flag it lacks.
func TestREADMEListsEveryUpFlag(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	described := map[string]string{} // flag → the last column of its row
	_, section, _ := strings.Cut(string(readme), upFlagsBegin)
	section, _, _ = strings.Cut(section, upFlagsEnd)
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)` \\| [^|]* \\| (.*) \\|$").FindAllStringSubmatch(section, -1) {
		described[m[1]] = m[2]
	}
	var cfg UpConfig
	table := "| flag | environment | default |\n|---|---|---|\n"
	up, _, err := root.Find([]string{"up"})
	if err != nil {
		t.Fatal(err)
	}
	for _, fl := range upFlagTable(&cfg) {
		env := upEnv(fl.name)
		if !strings.Contains(fl.usage, env) {
			t.Errorf("the help of --%s does not name %s", fl.name, env)
		}
		if up.Flags().Lookup(fl.name) == nil {
			t.Fatalf("up has no --%s", fl.name)
		}
		def, desc := "`"+fl.def+"`", described[fl.name]
		switch up.Flags().Lookup(fl.name).Value.Type() {
		case "bool":
			env, def = env+"=1", "off"
		case "duration": // 168h, not 168h0m0s
			d := fl.def
			if strings.HasSuffix(d, "m0s") {
				d = strings.TrimSuffix(d, "0s")
			}
			if strings.HasSuffix(d, "h0m") {
				d = strings.TrimSuffix(d, "0m")
			}
			def = "`" + d + "`"
		}
		if desc == "" {
			desc = fmt.Sprintf("%s: %s", def, fl.usage)
		} else if fl.def != "" && fl.name != "data-dir" && !strings.HasPrefix(desc, def) { // data-dir's is the user's
			t.Errorf("README.md: the row of --%s does not start with its default %s", fl.name, def)
		}
		table += fmt.Sprintf("| `--%s` | `%s` | %s |\n", fl.name, env, desc)
	}
	up.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if !strings.Contains(table, "| `--"+f.Name+"` |") {
			t.Errorf("up --%s is not in upFlagTable", f.Name)
		}
	})
	appliancetest.DocSection(t, "../README.md", upFlagsBegin, upFlagsEnd, table, "UPDATE_DOCS=1 go test ./cmd -run TestREADMEListsEveryUpFlag")
}
