package etcdembed

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"google.golang.org/grpc"
)

// TestLocalKV: the LocalKV client's reads and transactions reach the member with its client connections
// cut (they never went over them), while its watches are the other client's; closing it leaves the other
// client working.
func TestLocalKV(t *testing.T) {
	s, err := Start(context.Background(), Config{Dir: t.TempDir(), LogLevel: "fatal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	over, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { over.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A watch through the LocalKV client is the other client's stream, and sees the LocalKV's writes.
	local := s.LocalKV(over)
	wc := local.Watch(ctx, "k", clientv3.WithPrefix())
	if _, err := local.Put(ctx, "k1", "v1"); err != nil {
		t.Fatal(err)
	}
	if wr := <-wc; wr.Err() != nil || len(wr.Events) != 1 || string(wr.Events[0].Kv.Value) != "v1" {
		t.Fatalf("the watch: %v %v", wr.Err(), wr.Events)
	}
	// Closing it closes neither the other client's watches and leases nor its connection.
	local.Close()
	wc = over.Watch(ctx, "k", clientv3.WithPrefix())
	if _, err := over.Put(ctx, "k2", "v2"); err != nil {
		t.Fatal(err)
	}
	if wr := <-wc; wr.Err() != nil || len(wr.Events) != 1 || string(wr.Events[0].Kv.Value) != "v2" {
		t.Fatalf("the watch after the LocalKV client's close: %v %v", wr.Err(), wr.Events)
	}
	if _, err := over.Grant(ctx, 10); err != nil {
		t.Fatalf("a lease after the LocalKV client's close: %v", err)
	}

	// With the member's client connections cut, a transaction still reaches it in process, and a
	// linearizable read sees it; the client over the URL cannot.
	local = s.LocalKV(over)
	s.cut()
	resp, err := local.Txn(ctx).If(clientv3.Compare(clientv3.Version("k3"), "=", 0)).Then(clientv3.OpPut("k3", "v3")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("a transaction in process with the connections cut: %v", err)
	}
	got, err := local.Get(ctx, "k", clientv3.WithPrefix())
	if err != nil || got.Count != 3 {
		t.Fatalf("a read in process: %v (%d keys)", err, got.Count)
	}
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if _, err := over.Get(short, "k1"); err == nil {
		t.Fatal("a read over the member's URL succeeded with its connections cut: the test proves nothing")
	}
}

// refusing is a KV client that refuses its first `refusals` reads with err, then reads as the member does.
type refusing struct {
	pb.KVClient
	refusals int
	err      error
	ranges   int
}

func (r *refusing) Range(ctx context.Context, in *pb.RangeRequest, opts ...grpc.CallOption) (*pb.RangeResponse, error) {
	r.ranges++
	if r.ranges <= r.refusals {
		return nil, r.err
	}
	return r.KVClient.Range(ctx, in, opts...)
}

// TestLocalKVRetriesUnavailableReads: a read the member refuses as unavailable (a leader change, no
// leader) is tried again, as clientv3's interceptor does over a connection (TestClusterSelfFence is the
// real case: a frozen leader); another error is not, nor a write, and the retries are bounded.
func TestLocalKVRetriesUnavailableReads(t *testing.T) {
	s, err := Start(context.Background(), Config{Dir: t.TempDir(), LogLevel: "fatal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	member := adapter.KvServerToKvClient(v3rpc.NewQuotaKVServer(s.etcd.Server))
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		refusals int
		err      error
		ok       bool
		ranges   int
	}{
		{"a leader change, then the answer", 3, rpctypes.ErrGRPCLeaderChanged, true, 4},
		{"no leader, then the answer", 1, rpctypes.ErrGRPCNoLeader, true, 2},
		{"a compacted revision: not again", 1, rpctypes.ErrGRPCCompacted, false, 1},
		{"unavailable past the bound", readRetries + 5, rpctypes.ErrGRPCTimeout, false, readRetries},
	} {
		r := &refusing{KVClient: member, refusals: c.refusals, err: c.err}
		kv := clientv3.NewKVFromKVClient(retryReads{r}, nil)
		_, err := kv.Get(ctx, "k")
		if (err == nil) != c.ok || r.ranges != c.ranges {
			t.Errorf("%s: %v after %d reads, want ok=%v after %d", c.name, err, r.ranges, c.ok, c.ranges)
		}
	}
	// A write refused as unavailable is not sent again (its outcome may be unknown).
	r := &refusing{KVClient: member, refusals: 1, err: rpctypes.ErrGRPCLeaderChanged}
	w := &refusingWrites{KVClient: r, err: rpctypes.ErrGRPCLeaderChanged}
	if _, err := clientv3.NewKVFromKVClient(retryReads{w}, nil).Put(ctx, "k", "v"); err == nil || w.puts != 1 {
		t.Errorf("a write refused as unavailable: %v after %d puts, want an error after 1", err, w.puts)
	}
}

// refusingWrites refuses every write with err.
type refusingWrites struct {
	pb.KVClient
	err  error
	puts int
}

func (r *refusingWrites) Put(ctx context.Context, in *pb.PutRequest, opts ...grpc.CallOption) (*pb.PutResponse, error) {
	r.puts++
	return nil, r.err
}
