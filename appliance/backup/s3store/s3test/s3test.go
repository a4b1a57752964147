// Package s3test runs a real S3-compatible server for tests: versitygw (built by appliance/testtools)
// serving a temporary directory on a free loopback port.
package s3test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/theappliance/appliance/appliance/backup/s3store"
	"github.com/theappliance/appliance/appliance/testtools"
)

// Server is a running versitygw. Its posix backend keeps the object "name" of a bucket as the file
// <Dir>/<bucket>/<name>.
type Server struct {
	Dir       string
	Addr      string // 127.0.0.1:port
	AccessKey string
	SecretKey string
	Bucket    string // made by Start

	t    testing.TB
	bin  string
	log  string
	cmd  *exec.Cmd
	exit chan error
}

// Start starts a server on a new temporary directory with the bucket "test", and stops it at the test's
// end.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartIn(t, t.TempDir())
}

// StartIn is Start with the server's directory (its objects and log) in dir, an empty directory the test
// removes.
func StartIn(t testing.TB, dir string) *Server {
	t.Helper()
	bin := testtools.Versitygw.Path()
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("versitygw is not built (the package's TestMain builds it: testtools.Main(m, testtools.Versitygw)): %v", err)
	}
	s := &Server{Dir: filepath.Join(dir, "data"), AccessKey: "testaccess", SecretKey: "testsecret-0123456789",
		Bucket: "test", t: t, bin: bin, log: filepath.Join(dir, "versitygw.log")}
	if err := os.Mkdir(s.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	// A free port may be taken by another process before versitygw binds it: then try another.
	var err error
	for range 3 {
		l, lerr := net.Listen("tcp", "127.0.0.1:0")
		if lerr != nil {
			t.Fatal(lerr)
		}
		s.Addr = l.Addr().String()
		l.Close()
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Client().MakeBucket(context.Background(), s.Bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("make the bucket: %v", err)
	}
	return s
}

// Restart starts the server (again) on the same directory and port, and waits until it answers.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatal(err)
	}
}

func (s *Server) start() error {
	if s.cmd != nil {
		return errors.New("versitygw is running")
	}
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(s.bin, "--access", s.AccessKey, "--secret", s.SecretKey, "--port", s.Addr, "posix", s.Dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd, s.exit = cmd, make(chan error, 1)
	go func() { s.exit <- cmd.Wait() }()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get("http://" + s.Addr + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case err := <-s.exit:
			s.cmd = nil
			return fmt.Errorf("versitygw exited (%v): %s", err, s.logTail())
		case <-deadline:
			s.Stop()
			return fmt.Errorf("versitygw does not answer on %s: %s", s.Addr, s.logTail())
		case <-tick.C:
		}
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Stop kills the server (SIGKILL: a server that dies) and waits for it; a stopped server is not an error.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.t.Errorf("stop versitygw: %v", err)
	}
	<-s.exit
	s.cmd = nil
}

// Client is a plain S3 client of the server (to look at the bucket without the store).
func (s *Server) Client() *minio.Client {
	s.t.Helper()
	c, err := minio.New(s.Addr, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		BucketLookup: minio.BucketLookupPath, Region: "us-east-1"})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// Config is a store's configuration for the server's bucket, with the given prefix and a fixed data key.
func (s *Server) Config(prefix string) s3store.Config {
	return s3store.Config{Endpoint: s.Addr, Region: "us-east-1", Bucket: s.Bucket, Prefix: prefix, PathStyle: true,
		PlainHTTP: true, AccessKey: s.AccessKey, SecretKey: s.SecretKey, DataKey: []byte(strings.Repeat("k", 32))}
}

// Path is the file that holds the object name (the stored name, with the store's prefix) of the bucket.
func (s *Server) Path(name string) string {
	return filepath.Join(s.Dir, s.Bucket, filepath.FromSlash(name))
}

// String is the server's address and directory.
func (s *Server) String() string { return fmt.Sprintf("versitygw at %s on %s", s.Addr, s.Dir) }
