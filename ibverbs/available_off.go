//go:build !(ibverbs && linux && cgo)

package ibverbs

// Available reports whether this build includes the provider (build tag
// ibverbs, on Linux with cgo).
const Available = false
