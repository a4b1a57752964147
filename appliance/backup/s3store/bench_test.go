package s3store_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/backup/dirstore"
	"github.com/theappliance/appliance/appliance/backup/s3store/s3test"
)

// BenchmarkPutGet: Put and Get of a 64 MiB object, in the bucket (versitygw on loopback, compressed and
// sealed) and in the local directory store, for incompressible bytes and for text-like rows.
//
//	go test -run '^$' -bench BenchmarkPutGet -benchtime 5x ./appliance/backup/s3store/
func BenchmarkPutGet(b *testing.B) {
	const size = 64 << 20
	random := make([]byte, size)
	rng := rand.NewChaCha8([32]byte{1})
	rng.Read(random)
	var rows bytes.Buffer
	for i := 0; rows.Len() < size; i++ {
		fmt.Fprintf(&rows, "%d|%d|%d|account %016x, balance %d, note %x\n", i, i%1000, i%10, rand.Uint64(), rand.IntN(1e6), rand.Uint32())
	}
	data := map[string][]byte{"random": random, "rows": rows.Bytes()[:size]}

	srv := s3test.Start(b)
	cfg := srv.Config("bench")
	cfg.UploadState = filepath.Join(b.TempDir(), "uploads") // as up has it
	stores := map[string]backup.Objects{"s3store": newBucket(b, cfg), "dirstore": &dirstore.Dir{Root: filepath.Join(b.TempDir(), "backups")}}
	ctx := context.Background()
	for _, kind := range []string{"random", "rows"} {
		for _, name := range []string{"s3store", "dirstore"} {
			o := stores[name]
			b.Run(name+"/put/"+kind, func(b *testing.B) {
				b.SetBytes(size)
				for b.Loop() {
					if _, err := o.Put(ctx, "p/"+kind, bytes.NewReader(data[kind])); err != nil {
						b.Fatal(err)
					}
				}
				if name == "s3store" {
					raw, err := srv.Client().StatObject(ctx, srv.Bucket, "bench/p/"+kind, minio.StatObjectOptions{})
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(raw.Size)/size, "stored/plain")
				}
			})
			b.Run(name+"/get/"+kind, func(b *testing.B) {
				b.SetBytes(size)
				for b.Loop() {
					r, err := o.Get(ctx, "p/"+kind)
					if err != nil {
						b.Fatal(err)
					}
					n, err := io.Copy(io.Discard, r)
					r.Close()
					if err != nil || n != size {
						b.Fatal(n, err)
					}
				}
			})
		}
	}
}
