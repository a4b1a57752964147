package cmd

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance/backup/metasnap"
	"github.com/theappliance/appliance/appliance/node"
)

func init() {
	bs := &cobra.Command{Use: "backup-store", Short: "The backup store's keys"}
	var dataDir string
	rk := &cobra.Command{
		Use:   "recovery-key",
		Short: "Print the recovery key that decrypts the metadata snapshots in the bucket (as root or the data directory's owner)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			key, err := readRecoveryKeyAsOwner(dataDir)
			if err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), hex.EncodeToString(key))
			return nil
		},
	}
	rk.Flags().StringVar(&dataDir, "data-dir", envDefault("APPLIANCE_DATA_DIR", node.Defaults().DataDir), "data directory (APPLIANCE_DATA_DIR)")
	bs.AddCommand(rk)
	root.AddCommand(bs)
}

// readRecoveryKeyAsOwner reads the data directory's recovery key, for root or the directory's owner only.
func readRecoveryKeyAsOwner(dataDir string) ([]byte, error) {
	st, err := os.Stat(dataDir)
	if err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && os.Geteuid() != 0 && uint32(os.Geteuid()) != sys.Uid {
		return nil, fmt.Errorf("the recovery key is for root or the owner of %s (uid %d); you are uid %d: run it as one of them (sudo)",
			dataDir, sys.Uid, os.Geteuid())
	}
	key, err := metasnap.ReadRecoveryKey(filepath.Join(dataDir, node.RecoveryKeyFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s has no recovery key: it is made at the first start of up with --backup-store", dataDir)
	}
	return key, err
}
