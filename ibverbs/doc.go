// Package ibverbs is a verbs provider over the kernel's RDMA devices
// through rdma-core's libibverbs: ConnectX and other RoCE/InfiniBand NICs,
// and the kernel's own rdma_rxe and siw. It lets code written against the
// verbs package (and tested on softib's pure-Go Soft-RoCE provider, rxe)
// run unchanged on real RDMA hardware.
//
// The provider needs cgo and rdma-core's development files, so it is built
// only with the build tag ibverbs:
//
//	apt-get install libibverbs-dev librdmacm-dev   # Debian/Ubuntu
//	go build -tags ibverbs ./cmd/softib
//
// Without the tag the package is empty and the default build stays pure
// Go and cgo-free. With it, importing the package registers the provider
// "ibverbs"; open a device with verbs.Open(verbs.DeviceConfig{Provider:
// "ibverbs", Name: "mlx5_0"}) (or by Addr: the device whose GID table holds
// that IP address).
//
// Memory: an MR registers Go memory in place. The buffer is pinned with a
// runtime.Pinner for the lifetime of the registration (Go's collector does
// not move heap objects; the pin keeps the cgo pointer rules and the
// buffer alive while the NIC may DMA to it) and unpinned by Dereg. Work
// requests, scatter lists and completions are staged in C memory owned by
// each QP and CQ, so posting and polling allocate nothing on the Go heap.
//
// Connection management on this provider is the kernel's: the IB CM runs in
// the kernel and librdmacm reaches it. See Available for whether the
// provider was compiled in.
//
// Verbs libibverbs does not offer are refused with verbs.ErrNotSupported
// (the provider does not implement their optional interfaces):
// verbs.ModifyAH (modify_av: libibverbs has no ibv_modify_ah, and Linux rxe
// no modify_ah), verbs.RegSharedMR (register_smr: no shared registration in
// libibverbs) and fast registration (REG_MR is a kernel-only work request).
// The conformance suite checks the refusal on the guest's rxe0.
package ibverbs
