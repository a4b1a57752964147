package cmd

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance/node"
)

// `appliance install` runs the appliance as a systemd service: a unit (serviceUnit) whose ExecStart is
// this binary's `up --config FILE`, the configuration file written if absent (up's settings as the flags,
// environment and --config given to install make them: the lines config print shows), the programs and
// the instances' OS user made ready (node.PrepareService), then `systemctl daemon-reload` and `systemctl
// enable --now`. `appliance uninstall` stops and disables it and removes the unit, keeping the data
// directory and the configuration.

const (
	serviceName       = "appliance"
	defaultUnitDir    = "/etc/systemd/system"
	defaultConfigPath = "/etc/appliance/appliance.toml"
)

// serviceOpts are install's and uninstall's own flags (the paths are flags for the tests).
type serviceOpts struct {
	unitDir, configPath, systemctl string
	noEnable, noPrepare            bool
}

func (o *serviceOpts) bind(c *cobra.Command, enableFlag, enableUsage string) {
	c.Flags().StringVar(&o.unitDir, "unit-dir", defaultUnitDir, "directory of the systemd unit "+serviceName+".service")
	c.Flags().StringVar(&o.configPath, "config-path", defaultConfigPath, "the service's configuration file (up --config)")
	c.Flags().StringVar(&o.systemctl, "systemctl", "systemctl", "the systemctl program")
	c.Flags().BoolVar(&o.noEnable, enableFlag, false, enableUsage)
}

func (o *serviceOpts) unitPath() string { return filepath.Join(o.unitDir, serviceName+".service") }

// systemctlRun runs systemctl with args (no shell), its output to out.
func (o *serviceOpts) systemctlRun(out io.Writer, args ...string) error {
	cmd := exec.Command(o.systemctl, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", o.systemctl, strings.Join(args, " "), err)
	}
	return nil
}

func init() {
	var cfg UpConfig
	var o serviceOpts
	install := &cobra.Command{
		Use:   "install",
		Short: "Run the appliance as a systemd service (root): write the unit and the config file, enable and start it",
		Long: `Install the appliance as the systemd service ` + serviceName + `.service (as root):
  - the unit (--unit-dir, default ` + defaultUnitDir + `) runs this binary's ` + "`up --config FILE`" + ` as root, which
    starts the instances as their unprivileged OS user, confined: NoNewPrivileges, ProtectSystem=strict
    with the data directory and embedded-postgres' cache writable and a private /tmp, Restart=on-failure;
  - the config file (--config-path, default ` + defaultConfigPath + `) is written if absent, from up's flags
    given here (and their environment variables, and --config): the settings that differ from the
    defaults, the defaults as comments. An existing file is kept (edit it, then systemctl restart ` + serviceName + `);
  - the instances' OS user and the programs up needs are made ready now (--no-prepare: not), since the
    confined service cannot install packages or add users;
  - then systemctl daemon-reload and systemctl enable --now ` + serviceName + ` (--no-enable: not).
appliance uninstall undoes it and keeps the data.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runInstall(c, &cfg, &o) },
	}
	upFlags(install, &cfg)
	o.bind(install, "no-enable", "write the files only: no systemctl daemon-reload, no enable --now")
	install.Flags().BoolVar(&o.noPrepare, "no-prepare", false, "do not make the OS user and the programs ready (up will, where it can)")

	uninstall := &cobra.Command{
		Use:   "uninstall",
		Short: "Stop and disable the appliance's systemd service and remove its unit (root); the data and config stay",
		Args:  cobra.NoArgs,
		RunE:  func(c *cobra.Command, _ []string) error { return runUninstall(c, &o) },
	}
	o.bind(uninstall, "no-disable", "remove the unit only: no systemctl disable --now, no daemon-reload")
	root.AddCommand(install, uninstall)
}

// mustBeRoot refuses a command that writes the system's units unless run as root.
func mustBeRoot(what string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("appliance %s must run as root (it writes systemd's units and runs systemctl): sudo appliance %s", what, what)
	}
	return nil
}

func runInstall(c *cobra.Command, cfg *UpConfig, o *serviceOpts) error {
	if err := mustBeRoot("install"); err != nil {
		return err
	}
	out := c.OutOrStdout()
	if cfg.Ephemeral || cfg.EnvFile != "" || cfg.ExitWithParent {
		return errors.New("a service is not ephemeral: --ephemeral, --env-file and --exit-with-parent are for throwaway appliances")
	}
	configPath, err := filepath.Abs(o.configPath)
	if err != nil {
		return err
	}
	_, statErr := os.Stat(configPath)
	keep := statErr == nil
	if keep {
		// The service runs with that file: its paths are what the unit must make writable.
		if cfg.ConfigFile != "" && cfg.ConfigFile != configPath {
			return fmt.Errorf("%s exists: the service keeps it; edit it rather than giving --config %s", configPath, cfg.ConfigFile)
		}
		for _, fl := range upFlagTable(cfg) {
			if f := c.Flags().Lookup(fl.name); f.Changed && fl.name != "config" {
				return fmt.Errorf("%s exists and the service keeps it, so --%s would not apply: edit the file (appliance config print --config %s shows it), or remove it to have install write a new one", configPath, fl.name, configPath)
			}
		}
		cfg.ConfigFile = configPath
	} else if !errors.Is(statErr, fs.ErrNotExist) {
		return fmt.Errorf("config file: %w", statErr)
	}
	if err := loadUpConfig(c, cfg); err != nil {
		return err
	}
	if err := checkUpFlags(cfg); err != nil {
		return err
	}
	// The file holds absolute paths: the service's working directory is /.
	for _, name := range []string{"data-dir", "pg-embedded-cache"} {
		f := c.Flags().Lookup(name)
		if v := f.Value.String(); v != "" && !filepath.IsAbs(v) {
			abs, err := filepath.Abs(v)
			if err != nil {
				return err
			}
			_ = f.Value.Set(abs)
		}
	}
	exe, err := serviceExecutable()
	if err != nil {
		return err
	}
	unit, err := serviceUnit(*cfg, exe, configPath)
	if err != nil {
		return err
	}
	if !o.noPrepare {
		fmt.Fprintln(out, "making the instances' OS user and the programs ready (the confined service cannot)")
		if err := node.PrepareService(c.Context(), *cfg, slog.New(slog.NewTextHandler(c.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))); err != nil {
			return err
		}
	} else {
		paths, _ := node.ServicePaths(*cfg) // serviceUnit checked them
		for _, p := range paths {
			if err := os.MkdirAll(p, 0o700); err != nil {
				return fmt.Errorf("create %s: %w", p, err)
			}
		}
	}
	if keep {
		fmt.Fprintf(out, "kept the config file %s\n", configPath)
	} else {
		if err := os.MkdirAll(filepath.Dir(configPath), 0o755); err != nil {
			return fmt.Errorf("config file: %w", err)
		}
		if err := writeFileExcl(configPath, serviceConfig(c, cfg), 0o600); err != nil {
			return fmt.Errorf("config file: %w", err)
		}
		fmt.Fprintf(out, "wrote the config file %s\n", configPath)
	}
	if err := os.MkdirAll(o.unitDir, 0o755); err != nil {
		return fmt.Errorf("unit: %w", err)
	}
	if err := writeFileAtomic(o.unitPath(), []byte(unit), 0o644); err != nil {
		return fmt.Errorf("unit: %w", err)
	}
	fmt.Fprintf(out, "wrote the unit %s\n", o.unitPath())
	if o.noEnable {
		fmt.Fprintf(out, "not enabled (--no-enable): systemctl daemon-reload && systemctl enable --now %s\n", serviceName)
		return nil
	}
	if err := o.systemctlRun(out, "daemon-reload"); err != nil {
		return err
	}
	if err := o.systemctlRun(out, "enable", "--now", serviceName); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s.service is enabled and started: systemctl status %s, journalctl -u %s\n", serviceName, serviceName, serviceName)
	return nil
}

func runUninstall(c *cobra.Command, o *serviceOpts) error {
	if err := mustBeRoot("uninstall"); err != nil {
		return err
	}
	out := c.OutOrStdout()
	unit := o.unitPath()
	if _, err := os.Stat(unit); err != nil {
		return fmt.Errorf("no service installed: %w", err)
	}
	if !o.noEnable {
		if err := o.systemctlRun(out, "disable", "--now", serviceName); err != nil {
			return err
		}
	}
	if err := os.Remove(unit); err != nil {
		return err
	}
	fmt.Fprintf(out, "removed the unit %s\n", unit)
	if !o.noEnable {
		if err := o.systemctlRun(out, "daemon-reload"); err != nil {
			return err
		}
	}
	dataDir := node.Defaults().DataDir
	var file struct {
		DataDir string `toml:"data-dir"`
	}
	if _, err := toml.DecodeFile(o.configPath, &file); err == nil && file.DataDir != "" {
		dataDir = file.DataDir
	}
	fmt.Fprintf(out, "kept the data directory %s and the config file %s (remove them yourself to erase the appliance's data)\n", dataDir, o.configPath)
	return nil
}

// serviceExecutable is this binary's absolute path, refused when it is a `go run` build (deleted at its
// exit).
func serviceExecutable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("this binary's path: %w", err)
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return "", fmt.Errorf("this binary's path: %w", err)
	}
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "", fmt.Errorf("%s is a go run build, removed when it exits: build the binary (go build -o /usr/local/bin/appliance .) and run its install", exe)
	}
	return exe, nil
}

// unitSafe refuses a path a unit would split or expand (white space, quotes, backslash, %, $).
func unitSafe(what, p string) error {
	if strings.ContainsAny(p, " \t\n\"'\\%$") {
		return fmt.Errorf("%s %q: a systemd unit's path may not hold white space, quotes, backslashes, %% or $", what, p)
	}
	return nil
}

// serviceUnit is the unit running exe's up with configPath, for the settings cfg.
func serviceUnit(cfg UpConfig, exe, configPath string) (string, error) {
	for _, p := range [][2]string{{"the binary", exe}, {"the config file", configPath}} {
		if err := unitSafe(p[0], p[1]); err != nil {
			return "", err
		}
	}
	paths, err := node.ServicePaths(cfg)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(`# Written by appliance install (appliance %s); appliance uninstall removes it.
[Unit]
Description=The appliance: managed PostgreSQL, key-value stores and backups
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
ExecStart=%s up --config %s
# root: up starts the instances as their own unprivileged OS user (PostgreSQL refuses root).
User=root
NoNewPrivileges=yes
ProtectSystem=strict
# What up writes: the data directory and embedded-postgres' archive cache; /tmp is private.
ReadWritePaths=%s
PrivateTmp=yes
Restart=on-failure
RestartSec=5s
LimitNOFILE=%d
# SIGTERM to up alone, which stops its servers in order; what is left after the timeout is killed.
KillMode=mixed
TimeoutStopSec=120s
# up makes a cgroup per project's server under its own: with cgroup v2 it moves itself into
# <its group>/supervisor first (no controller is enabled under a group holding processes).
Delegate=yes

[Install]
WantedBy=multi-user.target
`, Version, exe, configPath, strings.Join(paths, " "), node.ServiceFileLimit(cfg)), nil
}

// serviceConfig is the service's configuration file: the settings that are not the defaults, then the
// defaults as comments (an up of a later version may change a default: the file does not pin them).
func serviceConfig(c *cobra.Command, cfg *UpConfig) []byte {
	var set, defaults strings.Builder
	for _, st := range upSettings(c, cfg) {
		switch {
		case st.name == "config":
		case st.isDefault:
			fmt.Fprintf(&defaults, "# %s = %s\n", st.name, st.value)
		default:
			fmt.Fprintf(&set, "%s = %s\n", st.name, st.value)
		}
	}
	return []byte(fmt.Sprintf("# The appliance service's settings (appliance up --config): each key is a flag of up's.\n"+
		"# Written by appliance install; edit it, then: systemctl restart %s\n%s\n# The defaults:\n%s", serviceName, set.String(), defaults.String()))
}

// writeFileExcl writes a new file (an existing one is an error).
func writeFileExcl(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeFileAtomic replaces path's content at once (a temporary file renamed over it).
func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
