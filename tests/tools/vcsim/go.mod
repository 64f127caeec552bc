// vCenter's stand-in for the CAPV consumer test (issue 23; see docs/testing.md): a small program of ours on govmomi
// v0.53.0's simulator package (the govmomi version CAPV v1.16.1 uses), because govmomi's own vcsim command is not
// served by the module proxy as a module. Built by tests/tools/k8s-bin.sh vcsim.
module example.invalid/capi-ipam-test-tools/vcsim

go 1.26.0

require github.com/vmware/govmomi v0.53.0

require github.com/google/uuid v1.6.0 // indirect
