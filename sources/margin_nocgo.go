//go:build !cgo

package sources

// cgoThreadMargin is zero without cgo: Go threads take their stacks from the Go heap.
const cgoThreadMargin = 0
