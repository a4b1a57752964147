package cmd

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// up's configuration file (--config, APPLIANCE_UP_CONFIG): TOML whose top-level keys are up's flag names
// (listen = "0.0.0.0:7443", spare-clusters = 4, rate-limit-loopback = true, verify-backups-every = "12h").
// A value there applies only where neither the command line nor the flag's environment variable gives
// one: file < environment < flag. An unknown key, or a value of the wrong type, stops up with the file's
// line.

// fromConfigFile is the annotation of a flag whose value came from the configuration file.
const fromConfigFile = "appliance-config-file"

// loadUpConfig applies the file of --config (if any) to c's up flags (upFlags bound them into cfg).
func loadUpConfig(c *cobra.Command, cfg *UpConfig) error {
	path := cfg.ConfigFile
	if path == "" {
		return nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var values map[string]any
	if _, err := toml.Decode(string(raw), &values); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	known := map[string]bool{}
	for _, fl := range upFlagTable(cfg) {
		known[fl.name] = fl.name != "config"
	}
	for key, v := range values {
		line := lineOfKey(string(raw), key)
		fl := c.Flags().Lookup(key)
		if !known[key] || fl == nil {
			return fmt.Errorf("%s:%d: unknown key %q (the keys are up's flag names, without --: see appliance up --help)", path, line, key)
		}
		var s string
		switch want := fl.Value.Type(); v := v.(type) {
		case string:
			if want == "bool" || want == "int" {
				return fmt.Errorf("%s:%d: %s: %q is a string, not a %s", path, line, key, v, map[string]string{"bool": "boolean (true or false)", "int": "number"}[want])
			}
			s = v
		case int64:
			if want != "int" {
				return fmt.Errorf("%s:%d: %s: %d is a number; give a %s", path, line, key, v, map[string]string{"bool": "boolean (true or false)", "string": "string in quotes", "duration": `duration in quotes, like "12h"`}[want])
			}
			s = strconv.FormatInt(v, 10)
		case bool:
			if want != "bool" {
				return fmt.Errorf("%s:%d: %s: %v is a boolean, not a %s", path, line, key, v, want)
			}
			s = strconv.FormatBool(v)
		default:
			return fmt.Errorf("%s:%d: %s: a %T is not a value of up's (a string, a number or a boolean)", path, line, key, v)
		}
		if fl.Changed || os.Getenv(upEnv(key)) != "" {
			continue // the command line or the environment wins
		}
		if err := fl.Value.Set(s); err != nil {
			return fmt.Errorf("%s:%d: %s: %w", path, line, key, err)
		}
		_ = c.Flags().SetAnnotation(key, fromConfigFile, []string{path})
	}
	return nil
}

// cfgFileSet says whether the configuration file gave flag its value.
func cfgFileSet(c *cobra.Command, flag string) bool {
	fl := c.Flags().Lookup(flag)
	return fl != nil && len(fl.Annotations[fromConfigFile]) > 0
}

// lineOfKey is the line of raw where key is given (0: not found, as for a key in a table).
func lineOfKey(raw, key string) int {
	re := regexp.MustCompile(`^\s*(` + regexp.QuoteMeta(key) + `|"` + regexp.QuoteMeta(key) + `"|'` + regexp.QuoteMeta(key) + `')\s*=`)
	for i, l := range strings.Split(raw, "\n") {
		if re.MatchString(l) {
			return i + 1
		}
	}
	return 0
}

func init() { root.AddCommand(newConfigCmd()) }

func newConfigCmd() *cobra.Command {
	var cfg UpConfig
	printCmd := &cobra.Command{
		Use:   "print",
		Short: "Print the configuration up would run with (TOML) and where each value comes from",
		Long: `Print the configuration ` + "`appliance up`" + ` would run with, given the same flags, environment and --config file:
each setting as a TOML line (what a --config file holds), with its source: the flag, the environment
variable, the file, or the default. The metrics token is not printed.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := loadUpConfig(c, &cfg); err != nil {
				return err
			}
			out := c.OutOrStdout()
			for _, st := range upSettings(c, &cfg) {
				fmt.Fprintf(out, "%-36s # %s\n", st.name+" = "+st.shown, st.source)
			}
			return nil
		},
	}
	upFlags(printCmd, &cfg)
	return groupCmd("config", nil, "Show up's configuration (flags, environment, --config file)", printCmd)
}

// upSetting is one of up's settings as c's flags (with the environment and the --config file applied) give
// it: its TOML value (shown: the metrics token hidden) and where it came from.
type upSetting struct {
	name, value, shown, source string
	isDefault                  bool
}

// upSettings are up's settings, in the flag table's order, as config print shows them and install writes
// them (loadUpConfig applied first).
func upSettings(c *cobra.Command, cfg *UpConfig) []upSetting {
	var out []upSetting
	for _, fl := range upFlagTable(cfg) {
		f := c.Flags().Lookup(fl.name)
		st := upSetting{name: fl.name, value: tomlValue(f), source: "default"}
		st.shown = st.value
		if f.Name == "metrics-token" && f.Value.String() != "" {
			st.shown = `"(set, not shown)"`
		}
		switch {
		case f.Changed:
			st.source = "flag --" + fl.name
		case os.Getenv(upEnv(fl.name)) != "":
			st.source = "environment " + upEnv(fl.name)
		case cfgFileSet(c, fl.name):
			st.source = "file " + cfg.ConfigFile
		default:
			st.isDefault = true
		}
		out = append(out, st)
	}
	return out
}

// tomlValue is a flag's value as TOML.
func tomlValue(f *pflag.Flag) string {
	v := f.Value.String()
	switch {
	case f.Value.Type() == "bool" || f.Value.Type() == "int":
		return v
	case f.Value.Type() == "duration":
		if d, err := time.ParseDuration(v); err == nil {
			v = d.String()
		}
	}
	return strconv.Quote(v)
}
