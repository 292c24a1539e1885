// Package storage holds the guest test of softib's block storage targets
// (storage/iser and storage/srp) against the Linux initiators; it has no
// code of its own.
package storage
