// Package acceptance holds the end-to-end tests of the appliance binary: each builds it (once a test
// process, with the testhooks tag), runs it as `appliance up` (one node, or three forming a cluster on
// 127.0.0.1, .2 and .3), and drives it as a person would: the API over HTTPS, the CLI, psql-speaking
// clients, SIGTERM, SIGKILL and SIGSTOP. Its benchmarks (BenchmarkRecover, the cluster's) run the same way.
// It has no code outside its tests; the CLI's own tests stay in cmd/.
package acceptance
