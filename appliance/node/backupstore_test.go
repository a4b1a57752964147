package node

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance"
)

// TestBucketFlagsParsed: --backup-store and its companions as up reads them, and what it refuses.
func TestBucketFlagsParsed(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if sc, err := parseBackupStore(Config{}); sc != nil || err != nil {
		t.Fatalf("no --backup-store: %+v %v", sc, err)
	}
	raw := bytes.Repeat([]byte{7}, 32)
	creds := write("creds", "# the bucket's\nAWS_ACCESS_KEY_ID=AK\n\nAWS_SECRET_ACCESS_KEY = s/ecret\n")
	sc, err := parseBackupStore(Config{BackupStore: "s3://bkt/some/prefix/", BackupStoreEndpoint: "http://127.0.0.1:9000",
		BackupStoreRegion: "eu-1", BackupStorePathStyle: true, BackupStoreCredentialsFile: creds,
		BackupStoreKeyFile: write("raw.key", string(raw))})
	if err != nil {
		t.Fatal(err)
	}
	if sc.Bucket != "bkt" || sc.Prefix != "some/prefix" || sc.Endpoint != "127.0.0.1:9000" || !sc.PlainHTTP || sc.Region != "eu-1" ||
		!sc.PathStyle || sc.AccessKey != "AK" || sc.SecretKey != "s/ecret" || !bytes.Equal(sc.DataKey, raw) {
		t.Fatalf("parsed %+v", sc)
	}
	sc, err = parseBackupStore(Config{BackupStore: "s3://bkt", BackupStoreEndpoint: "https://s3.example.com",
		BackupStoreKeyFile: write("hex.key", strings.Repeat("07", 32)+"\n")})
	if err != nil || sc.Prefix != "" || sc.Endpoint != "s3.example.com" || sc.PlainHTTP || !bytes.Equal(sc.DataKey, raw) || sc.DataKey == nil {
		t.Fatalf("parsed %+v, %v", sc, err)
	}
	if sc, err = parseBackupStore(Config{BackupStore: "s3://bkt", BackupStoreEndpoint: "minio:9000"}); err != nil || sc.Endpoint != "minio:9000" || sc.PlainHTTP || sc.DataKey != nil {
		t.Fatalf("parsed %+v, %v", sc, err)
	}
	for _, bad := range []struct {
		cfg  Config
		want string
	}{
		{Config{BackupStore: "/var/backups"}, "--backup-store"},
		{Config{BackupStore: "gs://bkt/p"}, "--backup-store"},
		{Config{BackupStore: "s3:///p"}, "--backup-store"},
		{Config{BackupStore: "s3://bkt", BackupStoreEndpoint: "ftp://host"}, "--backup-store-endpoint"},
		{Config{BackupStore: "s3://bkt", BackupStoreEndpoint: "https://host/path"}, "--backup-store-endpoint"},
		{Config{BackupStore: "s3://bkt", BackupStoreKeyFile: write("short.key", "0707")}, "64 hexadecimal digits"},
		{Config{BackupStore: "s3://bkt", BackupStoreKeyFile: filepath.Join(dir, "absent")}, "--backup-store-key-file"},
		{Config{BackupStore: "s3://bkt", BackupStoreCredentialsFile: write("half", "AWS_ACCESS_KEY_ID=AK\n")}, "want both"},
		{Config{BackupStore: "s3://bkt", BackupStoreCredentialsFile: write("other", "AWS_REGION=x\n")}, "AWS_REGION"},
	} {
		if _, err := parseBackupStore(bad.cfg); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: %v, want an error naming %q", bad.cfg, err, bad.want)
		}
	}
}

// TestBucketKeyDerived: the data key derived from secret.key is the same at every start, another use's
// key differs, and neither is the secret key.
func TestBucketKeyDerived(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret.key")
	box, err := appliance.OpenSecretBox(path)
	if err != nil {
		t.Fatal(err)
	}
	k1, err := box.DeriveKey(backupStoreKeyInfo)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := appliance.OpenSecretBox(path)
	k2, _ := again.DeriveKey(backupStoreKeyInfo)
	other, _ := box.DeriveKey("another use")
	secret, _ := os.ReadFile(path)
	if len(k1) != 32 || !bytes.Equal(k1, k2) || bytes.Equal(k1, other) || bytes.Equal(k1, secret) {
		t.Fatalf("derived %x, again %x, another %x", k1, k2, other)
	}
}
