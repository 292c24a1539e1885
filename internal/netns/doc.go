// Package netns builds throwaway network namespaces joined by veth links
// for tests that need a real kernel network path: two or more softib
// stacks on separate "hosts", kernel rxe interop, impaired links.
//
// A Node is one namespace. Code runs inside it either in-process with
// Node.Do (the socket created there stays in the namespace and can be used
// from any goroutine afterwards) or as a subprocess with Node.Command.
// Links are impaired with Node.SetNetem: tc netem when the kernel has it,
// otherwise an nftables rule set (loss and duplication only). A pair
// created with PairConfig.Relay is joined by TAP devices and a relay in
// the test process instead of veth; the relay applies every impairment
// itself, so delay, jitter, reorder and corruption work on any kernel.
//
// Everything is removed by t.Cleanup. Creating namespaces needs root:
// constructors call testenv.RequireRoot and RequireTool("ip").
//
// The package is Linux-only; on other systems it is empty.
package netns
